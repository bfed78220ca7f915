"""Text that cannot be encoded (issue 44, item 2): a lone UTF-16 surrogate anywhere in a JSON body is
422 naming the field, on every endpoint that takes a body, before anything stores or echoes it; a
body that never arrives is 408. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.api.app import create_app
from service.api.errors import _clean_error
from service.api.text import printable, surrogate_issues
from service.db import repository as repo
from service.settings import Settings

API = "/api/v1"
LONE = "\\udfff"  # as JSON spells it: one unpaired low surrogate


def _post_raw(client: TestClient, path: str, text: str, headers: dict[str, str]) -> Any:
    return client.post(path, content=text.encode(), headers={**headers, "content-type": "application/json"})


def _with_lone(body: dict[str, Any], field: str) -> str:
    """``body`` as JSON with ``field`` (top level) holding "a<lone surrogate>"."""
    return json.dumps(body | {field: "a@@"}).replace("@@", LONE)


def _assert_422_at(r: Any, loc: list[Any]) -> None:
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail[0]["loc"] == loc, detail
    assert "surrogate" in detail[0]["msg"] and "\\udfff" in detail[0]["msg"]


@pytest.mark.parametrize(
    ("who", "path", "body", "field"),
    [
        ("alice", "/searches", {"model": "tiny-mlp", "cluster": "two-node"}, "name"),
        ("alice", "/searches", {"cluster": "two-node"}, "model"),
        ("alice", "/simulators/retrain", {}, "domain"),
        ("alice", "/runtimes", {"model": "tiny-mlp", "cluster": "two-node", "iteration_times": [1]}, "model"),
        ("alice", "/profiles/jobs", {"batch": 8}, "model"),
        ("alice", "/models", {}, "name"),
        ("alice", "/clusters", {}, "name"),
        ("alice", "/profiles", {}, "source"),
        ("admin", "/tokens", {"role": "user"}, "name"),
        ("worker", "/workers/claim", {"clusters": ["two-node"]}, "worker"),
        ("worker", "/trials/1/heartbeat", {"claim_token": "x", "attempt": 1}, "worker"),
    ],
)
def test_a_lone_surrogate_is_422_naming_the_field(
    client: TestClient, tokens: dict[str, Any], who: str, path: str, body: dict[str, Any], field: str
) -> None:
    r = _post_raw(client, API + path, _with_lone(body, field), tokens[who])
    _assert_422_at(r, ["body", field])
    # the keep-alive connection is still good: the next request on the same client answers
    assert client.get(f"{API}/models/zoo", headers=tokens["alice"]).status_code in (200, 403)


def test_a_report_with_a_lone_surrogate_is_422_even_with_a_wrong_claim(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    sid = client.post(
        f"{API}/searches", json={"model": "tiny-mlp", "cluster": "two-node"}, headers=tokens["alice"]
    ).json()["id"]
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("h"), baseline="horovod")
    claim = client.post(
        f"{API}/workers/claim", json={"clusters": ["two-node"]}, headers=tokens["worker"]
    ).json()
    tid = claim["trial"]["id"]
    for token in ("wrong", claim["claim_token"]):
        report = {"attempt": claim["attempt"], "claim_token": token, "measurement": {"failure": "@@"}}
        r = _post_raw(
            client,
            f"{API}/trials/{tid}/report",
            json.dumps(report).replace("@@", "\\ud800"),
            tokens["worker"],
        )
        _assert_422_at_any(r, ["body", "measurement", "failure"])
    assert client.get(f"{API}/trials/{tid}", headers=tokens["alice"]).json()["state"] == "running"


def _assert_422_at_any(r: Any, loc: list[Any]) -> None:
    assert r.status_code == 422, r.text
    assert [d["loc"] for d in r.json()["detail"]] == [loc]


def test_nested_fields_and_keys_are_named(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    model = specs.model()
    text = json.dumps(model).replace('"fc1.bias"', '"fc1.@@"').replace("@@", LONE)
    r = _post_raw(client, f"{API}/models", text, tokens["alice"])
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "layers", 0, "variables", 1, "name"]
    text = json.dumps(model | {"@@": 1}).replace("@@", LONE)
    r = _post_raw(client, f"{API}/models", text, tokens["alice"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "\\udfff"]
    assert client.get(f"{API}/models", headers=tokens["alice"]).json()["count"] == 0


def test_a_surrogate_pair_is_fine(client: TestClient, tokens: dict[str, Any]) -> None:
    body = json.dumps({"model": "tiny-mlp", "cluster": "two-node", "name": "x"}).replace(
        '"x"', '"\\ud83d\\ude00"'
    )
    r = _post_raw(client, f"{API}/searches", body, tokens["alice"])
    assert r.status_code == 201 and r.json()["name"] == "\U0001f600"


def test_the_error_handler_never_echoes_what_it_cannot_encode() -> None:
    error = {
        "loc": ("body", "a\udfff"),
        "msg": "bad \udfff",
        "type": "t",
        "input": "x\udfff",
        "ctx": {"k": "\ud800"},
    }
    out = _clean_error(error)
    json.dumps(out, ensure_ascii=False).encode("utf-8")  # would raise UnicodeEncodeError
    assert "input" not in out and out["loc"] == ["body", "a\\udfff"]
    assert printable("ok") == "ok" and printable("\ud800") == "\\ud800"
    assert surrogate_issues(b'{"a": "\\\\udfff"}') == []  # an escaped backslash, not a surrogate
    assert surrogate_issues(b"not json \\udfff") == []


def test_a_body_that_never_arrives_is_408(
    settings: Settings, engine: Engine, zoo_dir: Path, tokens: dict[str, Any]
) -> None:
    app = create_app(settings.model_copy(update={"body_timeout_s": 0.3}))
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    headers = [(k.lower().encode(), v.encode()) for k, v in tokens["alice"].items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"{API}/models",
        "raw_path": f"{API}/models".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [*headers, (b"content-length", b"100")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }

    async def run() -> None:
        async with app.router.lifespan_context(app):
            await asyncio.wait_for(app(scope, receive, send), 10)

    asyncio.run(run())
    assert sent[0]["status"] == 408
