"""Bad input cannot hurt the API (issue 20): bounded specs and integers, finite numbers, printable
names, body limits and authentication before the body, quotas, retrain domains. Every test runs on
SQLite and PostgreSQL (where integers out of int4 range and NUL characters used to be 500s)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.api.app import create_app
from service.db import repository as repo
from service.settings import Settings

API = "/api/v1"
HUGE = [2**31, 2**63]  # past PostgreSQL int4; past SQLite int64


def _post_raw(client: TestClient, path: str, text: str, headers: dict[str, str]) -> Any:
    """POST a body as written (json= cannot send NaN or Infinity literals)."""
    return client.post(path, content=text.encode(), headers={**headers, "content-type": "application/json"})


def _loc(r: Any) -> list[Any]:
    assert r.status_code == 422, r.text
    return list(r.json()["detail"][0]["loc"])


# --- finding 1 and 5: absurd specs are refused at the door ------------------------------------


@pytest.mark.parametrize(
    ("kind", "path", "value", "loc"),
    [
        ("clusters", ("nodes", 0, "gpus"), 10**12, ["body", "nodes", 0, "gpus"]),
        ("clusters", ("nodes", 0, "nic_gbps"), 1e308, ["body", "nodes", 0, "nic_gbps"]),
        ("models", ("batch_size",), 2**70, ["body", "batch_size"]),
        (
            "models",
            ("layers", 0, "variables", 0, "shape"),
            [2**70],
            ["body", "layers", 0, "variables", 0, "shape"],
        ),
        ("models", ("name",), "bad\x00name", ["body", "name"]),
    ],
)
def test_absurd_specs_are_422_with_the_field(
    client: TestClient,
    tokens: dict[str, Any],
    specs: Any,
    kind: str,
    path: tuple[Any, ...],
    value: Any,
    loc: list[Any],
) -> None:
    body = specs.cluster() if kind == "clusters" else specs.model()
    node = body
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    assert _loc(client.post(f"{API}/{kind}", json=body, headers=tokens["alice"])) == loc
    assert client.get(f"{API}/{kind}", headers=tokens["alice"]).json()["count"] == 0


def test_a_model_without_variables_is_422(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    body = specs.model()
    for layer in body["layers"]:
        layer["variables"] = []
    r = client.post(f"{API}/models", json=body, headers=tokens["alice"])
    assert _loc(r) == ["body", "layers"] and "no variables" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize("literal", ["Infinity", "NaN", "-Infinity", "1e400"])
def test_non_finite_flops_are_422(
    client: TestClient, tokens: dict[str, Any], specs: Any, literal: str
) -> None:
    text = json.dumps(specs.model()).replace('"fwd_flops": 4096.0', f'"fwd_flops": {literal}')
    assert literal in text
    assert _loc(_post_raw(client, f"{API}/models", text, tokens["alice"])) == [
        "body",
        "layers",
        0,
        "fwd_flops",
    ]


def test_poison_search_is_refused(client: TestClient, tokens: dict[str, Any]) -> None:
    body = {"model": "tiny-mlp", "cluster": "two-node", "samples_per_round": 1_000_000}
    assert _loc(client.post(f"{API}/searches", json=body, headers=tokens["alice"])) == [
        "body",
        "samples_per_round",
    ]


# --- finding 2: integers outside the database's range are 422, never 500 ------------------------


@pytest.mark.parametrize("big", HUGE)
def test_ids_out_of_range_in_paths_are_422(client: TestClient, tokens: dict[str, Any], big: int) -> None:
    user, admin, worker = tokens["alice"], tokens["admin"], tokens["worker"]
    hb = {"attempt": 1, "claim_token": "x"}
    calls = [
        ("get", f"/candidates/{big}", user, None),
        ("post", f"/candidates/{big}/approve", user, None),
        ("post", f"/candidates/{big}/reject", user, None),
        ("get", f"/searches/{big}", user, None),
        ("post", f"/searches/{big}/cancel", user, None),
        ("get", f"/searches/{big}/trials", user, None),
        ("get", f"/searches/{big}/rounds", user, None),
        ("get", f"/searches/{big}/candidates", user, None),
        ("get", f"/searches/1/trials?round={big}", user, None),
        ("get", f"/trials/{big}", user, None),
        ("post", f"/trials/{big}/heartbeat", worker, hb),
        ("get", f"/simulators/{big}", user, None),
        ("get", f"/models/{big}", user, None),
        ("get", f"/clusters/{big}", user, None),
        ("post", f"/tokens/{big}/revoke", admin, None),
        ("get", f"/runtimes?since_id={big}", user, None),
    ]
    for method, path, headers, body in calls:
        r = client.request(method, API + path, headers=headers, json=body)
        assert r.status_code == 422, (path, r.status_code, r.text)
    r = client.post(f"{API}/workers/claim", json={"clusters": ["two-node"], "trial_id": big}, headers=worker)
    assert _loc(r) == ["body", "trial_id"]


@pytest.mark.parametrize("field", ["seed", "model", "cluster"])
def test_search_integers_out_of_range_are_422(client: TestClient, tokens: dict[str, Any], field: str) -> None:
    for big in HUGE:
        body = {"model": "tiny-mlp", "cluster": "two-node", field: big}
        assert _loc(client.post(f"{API}/searches", json=body, headers=tokens["alice"])) == ["body", field]


def test_ids_in_range_still_name_specs(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    mid = client.post(f"{API}/models", json=specs.model("mine"), headers=tokens["alice"]).json()["id"]
    r = client.post(f"{API}/searches", json={"model": mid, "cluster": "two-node"}, headers=tokens["alice"])
    assert r.status_code == 201 and r.json()["model_name"] == "mine"
    r = client.post(
        f"{API}/searches", json={"model": 2**31 - 1, "cluster": "two-node"}, headers=tokens["alice"]
    )
    assert r.status_code == 422 and "no model" in r.json()["detail"][0]["msg"]


# --- finding 3: NUL and control characters in names are 422 on PostgreSQL too -------------------


def test_nul_in_any_name_is_422(client: TestClient, tokens: dict[str, Any]) -> None:
    user, worker = tokens["alice"], tokens["worker"]
    bad = "a\x00b"
    assert _loc(client.post(f"{API}/searches", json={"model": bad, "cluster": "two-node"}, headers=user)) == [
        "body",
        "model",
    ]
    body = {"model": "tiny-mlp", "cluster": "two-node", "name": bad}
    assert _loc(client.post(f"{API}/searches", json=body, headers=user)) == ["body", "name"]
    assert _loc(client.post(f"{API}/simulators/retrain", json={"domain": f"{bad}__x"}, headers=user)) == [
        "body",
        "domain",
    ]
    assert _loc(client.post(f"{API}/workers/claim", json={"clusters": [bad]}, headers=worker))[:2] == [
        "body",
        "clusters",
    ]
    assert _loc(
        client.post(f"{API}/tokens", json={"name": bad, "role": "user"}, headers=tokens["admin"])
    ) == [
        "body",
        "name",
    ]
    for query in ("/runtimes?domain=a%00__b", "/simulators?domain=a%00__b", "/simulators/retrain?domain=%00"):
        assert client.get(API + query, headers=user).status_code == 422, query
    assert client.get(f"{API}/models/zoo/a%00b", headers=user).status_code == 404


# --- finding 4: non-finite numbers in runtimes and reports --------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "1e308", "-1"])
def test_bad_iteration_times_are_422_and_the_answer_serialises(
    client: TestClient, tokens: dict[str, Any], specs: Any, literal: str
) -> None:
    body = {
        "model": "tiny-mlp",
        "cluster": "two-node",
        "strategy": specs.strategy(),
        "iteration_times": [0.5],
    }
    text = json.dumps(body).replace("[0.5]", f"[0.5, {literal}]")
    r = _post_raw(client, f"{API}/runtimes", text, tokens["alice"])
    assert _loc(r) == ["body", "iteration_times", 1]
    json.loads(r.text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c} in the answer"))
    assert client.get(f"{API}/runtimes", headers=tokens["alice"]).json()["count"] == 0


def test_a_report_with_nan_is_422(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    sid = client.post(
        f"{API}/searches", json={"model": "tiny-mlp", "cluster": "two-node"}, headers=tokens["alice"]
    ).json()["id"]
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("h"), baseline="horovod")
    claim = client.post(
        f"{API}/workers/claim", json={"clusters": ["two-node"]}, headers=tokens["worker"]
    ).json()
    report = {
        "attempt": claim["attempt"],
        "claim_token": claim["claim_token"],
        "measurement": {"iteration_times": [1]},
    }
    for bad in (
        '{"iteration_times": [NaN]}',
        '{"iteration_times": [0.1], "environment": {"load": Infinity}}',
        '{"iteration_times": [0.1], "environment": {"host": "\\ud800"}}',  # a lone surrogate
        '{"iteration_times": [0.1], "environment": {"host": "a\\u0000b"}}',
    ):
        text = json.dumps(report).replace('{"iteration_times": [1]}', bad)
        r = _post_raw(client, f"{API}/trials/{claim['trial']['id']}/report", text, tokens["worker"])
        assert r.status_code == 422, r.text
    trial = client.get(f"{API}/trials/{claim['trial']['id']}", headers=tokens["alice"]).json()
    assert trial["state"] == "running"


# --- finding 6: body limit before the body is read, authentication before it is parsed ---------


@pytest.fixture
def small_app(settings: Settings, engine: Engine, zoo_dir: Path) -> Iterator[FastAPI]:
    """The API with a 4 KiB body limit and quotas of 2 active searches / 3 queued trials."""
    yield create_app(
        settings.model_copy(update={"max_body_bytes": 4096, "max_active_searches": 2, "max_queued_trials": 3})
    )


def test_a_body_over_the_limit_is_413(small_app: FastAPI, tokens: dict[str, Any], specs: Any) -> None:
    with TestClient(small_app) as client:
        big = specs.model() | {"source": "x" * 5000}
        r = client.post(f"{API}/models", json=big, headers=tokens["alice"])
        assert r.status_code == 413 and "4096" in r.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
            yield json.dumps(big).encode()

        r = client.post(f"{API}/models", content=chunks(), headers=tokens["alice"])
        assert r.status_code == 413
        small = client.post(f"{API}/models", json=specs.model(), headers=tokens["alice"])
        assert small.status_code == 201


def _asgi_post(app: FastAPI, path: str, headers: dict[str, str], *, chunked: bool = False) -> tuple[int, int]:
    """POST through the raw ASGI interface; returns (status, times the body was asked for)."""
    asked = 0
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return {"type": "http.request", "body": b"{" * 1000, "more_body": asked < 1000}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw.append((b"transfer-encoding", b"chunked") if chunked else (b"content-length", b"1000000"))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }

    async def run() -> None:
        async with app.router.lifespan_context(app):
            await app(scope, receive, send)

    asyncio.run(run())
    return int(sent[0]["status"]), asked


def test_413_and_401_come_before_the_body_is_read(small_app: FastAPI, tokens: dict[str, Any]) -> None:
    assert _asgi_post(small_app, f"{API}/models", tokens["alice"]) == (413, 0)  # Content-Length: unread
    assert _asgi_post(small_app, f"{API}/models", {}, chunked=True) == (401, 0)  # no token: unread
    assert _asgi_post(small_app, f"{API}/models", {"Authorization": "Bearer nope"}, chunked=True) == (401, 0)
    status, asked = _asgi_post(small_app, f"{API}/models", tokens["alice"], chunked=True)
    assert status == 413 and asked == 5  # read, counting, only until it passed 4096 bytes


def test_401_before_a_malformed_body_is_parsed(client: TestClient) -> None:
    r = _post_raw(client, f"{API}/searches", "{not json", {})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


# --- finding 7: quotas -------------------------------------------------------------------------


def test_active_search_quota_is_429_until_one_ends(small_app: FastAPI, tokens: dict[str, Any]) -> None:
    body = {"model": "tiny-mlp", "cluster": "two-node"}
    with TestClient(small_app) as client:
        ids = [
            client.post(f"{API}/searches", json=body, headers=tokens["alice"]).json()["id"] for _ in range(2)
        ]
        r = client.post(f"{API}/searches", json=body, headers=tokens["alice"])
        assert r.status_code == 429
        assert r.json()["detail"].startswith("you have 2 active searches, the limit is 2")
        assert client.post(f"{API}/searches", json=body, headers=tokens["bob"]).status_code == 201  # per user
        assert client.post(f"{API}/searches/{ids[0]}/cancel", headers=tokens["alice"]).status_code == 200
        assert client.post(f"{API}/searches", json=body, headers=tokens["alice"]).status_code == 201


def test_queued_trial_quota_is_429(
    small_app: FastAPI, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    body = {"model": "tiny-mlp", "cluster": "two-node"}
    with TestClient(small_app) as client:
        sid = client.post(f"{API}/searches", json=body, headers=tokens["alice"]).json()["id"]
        for name in ("horovod", "ps", "ps-naive"):
            repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy(name), baseline=name)
        r = client.post(f"{API}/searches", json=body, headers=tokens["alice"])
        assert r.status_code == 429 and "3 queued trials, the limit is 3" in r.json()["detail"]


# --- finding 8: retrain domains name a known model and cluster ----------------------------------


def test_retrain_domain_must_be_known(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    user = tokens["alice"]
    for domain in ("../../x__B1", "tiny-mlp__nowhere", "nothing__two-node"):
        r = client.post(f"{API}/simulators/retrain", json={"domain": domain}, headers=user)
        assert _loc(r) == ["body", "domain"], domain
    r = client.post(f"{API}/simulators/retrain", json={"domain": "TINY-MLP__two-node"}, headers=user)
    assert r.status_code == 202 and r.json()["domain"] == "tiny-mlp__two-node"
    # A name may itself contain '__': every split is tried.
    client.post(f"{API}/models", json=specs.model("my__net"), headers=user)
    r = client.post(f"{API}/simulators/retrain", json={"domain": "my__net__two-node"}, headers=user)
    assert r.status_code == 202 and r.json()["domain"] == "my__net__two-node"
    # Bob cannot retrain alice's upload (he cannot use it).
    r = client.post(f"{API}/simulators/retrain", json={"domain": "my__net__two-node"}, headers=tokens["bob"])
    assert r.status_code == 422


# --- zoo names in any case ---------------------------------------------------------------------


def test_zoo_names_are_case_insensitive(client: TestClient, tokens: dict[str, Any]) -> None:
    r = client.post(
        f"{API}/searches", json={"model": "TINY-MLP", "cluster": "Two-Node"}, headers=tokens["alice"]
    )
    assert r.status_code == 201
    assert (r.json()["model_name"], r.json()["cluster_name"]) == ("tiny-mlp", "two-node")
    assert client.get(f"{API}/models/zoo/Tiny-MLP", headers=tokens["alice"]).json()["name"] == "tiny-mlp"
    assert client.get(f"{API}/models/zoo/..%2F..%2Fx", headers=tokens["alice"]).status_code == 404


def test_non_finite_spec_float_in_api_never_reaches_storage(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    body = specs.cluster()
    text = json.dumps(body).replace('"intra_node_gbps": 100', '"intra_node_gbps": NaN')
    assert math.isnan(json.loads(text)["intra_node_gbps"])
    assert _loc(_post_raw(client, f"{API}/clusters", text, tokens["alice"])) == ["body", "intra_node_gbps"]


def test_longest_names_still_fit_their_domain_column(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    """A domain '<model>__<cluster>' is stored in VARCHAR(401): spec names stop at 199 characters."""
    user = tokens["alice"]
    assert _loc(client.post(f"{API}/models", json=specs.model("m" * 200), headers=user)) == ["body", "name"]
    assert client.post(f"{API}/models", json=specs.model("m" * 199), headers=user).status_code == 201
    assert client.post(f"{API}/clusters", json=specs.cluster("c" * 199), headers=user).status_code == 201
    body = {"model": "m" * 199, "cluster": "c" * 199, "strategy": specs.strategy(), "iteration_times": [0.5]}
    r = client.post(f"{API}/runtimes", json=body, headers=user)
    assert r.status_code == 201 and len(r.json()["domain"]) == 400
    r = client.post(f"{API}/simulators/retrain", json={"domain": r.json()["domain"]}, headers=user)
    assert r.status_code == 202


def test_the_token_is_verified_once_per_request(
    client: TestClient, tokens: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    verify = repo.verify_token

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return verify(*args, **kwargs)

    monkeypatch.setattr(repo, "verify_token", counting)
    assert client.get(f"{API}/me", headers=tokens["alice"]).json()["name"] == "alice"
    assert len(calls) == 1  # by the guard, before the body; the route reuses its principal


@pytest.mark.parametrize(
    ("field", "literal"),
    [
        ("fwd_s", "NaN"),
        ("fwd_s", "Infinity"),
        ("fwd_s", "1e308"),
        ("batch", str(2**63)),
        ("model", '"a\\u0000b"'),
    ],
)
def test_profiles_are_bounded_too(
    client: TestClient, tokens: dict[str, Any], field: str, literal: str
) -> None:
    body = {
        "kind": "profile",
        "model": "tiny-mlp",
        "device": "T4",
        "batch": 8,
        "layers": [{"name": "fc1", "fwd_s": 0.001, "bwd_s": 0.002}],
    }
    text = json.dumps(body)
    old = {"fwd_s": '"fwd_s": 0.001', "batch": '"batch": 8', "model": '"model": "tiny-mlp"'}[field]
    text = text.replace(old, f'"{field}": {literal}')
    r = _post_raw(client, f"{API}/profiles", text, tokens["alice"])
    assert r.status_code == 422 and field in r.json()["detail"][0]["loc"], r.text
    for query in ("/profiles?model=a%00b", "/profiles/compute?model=a%00b&cluster=two-node"):
        assert client.get(API + query, headers=tokens["alice"]).status_code == 422, query
