"""`serve --api-workers N`: the API runs as uvicorn worker processes beside the loop; a search created
over HTTP is taken up by the loop through the database (no in-process hook); stop ends them all."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.settings import Settings


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.slow  # starts uvicorn worker processes: ~30 s on a quiet host, minutes on a busy one
def test_api_worker_processes_serve_and_stop(
    tmp_path: Path, zoo_dir: Path, wait_for: Callable[..., Any]
) -> None:
    settings = Settings(data_dir=tmp_path / "data", database_url="", broker_url="")
    stack = Stack(settings, StackConfig(embedded_worker=False, port=0, tick_s=0.3, api_workers=2))
    stack.start()
    try:
        assert stack.api_process is not None
        supervisor = stack.api_process.pid
        workers = wait_for(lambda: len(c := _children(supervisor)) >= 2 and c, 60, "two uvicorn workers")
        assert os.getpid() not in workers
        with stack.sessions() as s:
            token = repo.create_token(s, name="alice", role="user").secret
        h = {"Authorization": f"Bearer {token}"}
        body = {"model": "tiny-mlp", "cluster": "two-node", "trial_budget": 1, "samples_per_round": 20}
        r = httpx.post(f"{stack.url}/api/v1/searches", json=body, headers=h, timeout=30)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        state = wait_for(
            lambda: (
                (st := httpx.get(f"{stack.url}/api/v1/searches/{sid}", headers=h, timeout=30).json())
                and st["search"]["state"] != "pending"
                and st
            ),
            60,
            "the loop to take the search up",
        )
        assert state["search"]["state"] == "running"
    finally:
        stack.stop()
    assert stack.api_process.poll() is not None
    wait_for(lambda: not any(Path(f"/proc/{w}").exists() for w in workers), 30, "the workers to exit")
