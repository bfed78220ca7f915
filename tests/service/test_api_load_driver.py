"""benchmarks/api_load.py's raw HTTP/1.1 driver reads answers the way the figures need: whole
answers only (Content-Length or chunked, split anywhere across reads), status and ETag right, and a
closed connection is an error, not a hang."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def api_load() -> Any:
    spec = importlib.util.spec_from_file_location("api_load", ROOT / "benchmarks" / "api_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["api_load"] = module
    spec.loader.exec_module(module)
    return module


ANSWERS = (
    b'HTTP/1.1 200 OK\r\ncontent-length: 5\r\nETag: "abc"\r\n\r\nhello'
    + b'HTTP/1.1 304 Not Modified\r\netag: "abc"\r\n\r\n'
    + b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"
)


@pytest.mark.parametrize("step", [1, 7, len(ANSWERS)])
def test_answers_are_framed_whatever_the_reads(api_load: Any, step: int) -> None:
    async def run() -> list[tuple[int, bytes]]:
        conn = api_load._Conn()
        got: list[tuple[int, bytes]] = []
        chunks = [ANSWERS[i : i + step] for i in range(0, len(ANSWERS), step)]
        for _ in range(3):
            conn.waiter = asyncio.get_running_loop().create_future()
            answer = conn._answer()  # what an earlier read left buffered
            while answer is None:
                conn.data_received(chunks.pop(0))
                if conn.waiter.done():
                    answer = conn.waiter.result()
            got.append(answer)
        assert not chunks and conn.buf == bytearray()
        return got

    assert asyncio.run(run()) == [(200, b'"abc"'), (304, b'"abc"'), (201, b"")]


def test_a_closed_connection_fails_the_request_in_flight(api_load: Any) -> None:
    async def run() -> None:
        conn = api_load._Conn()
        conn.waiter = asyncio.get_running_loop().create_future()
        conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhal")
        conn.connection_lost(None)
        with pytest.raises(ConnectionResetError):
            await conn.waiter
        with pytest.raises(ConnectionResetError):
            await conn.exchange(b"GET / HTTP/1.1\r\n\r\n")

    asyncio.run(run())
