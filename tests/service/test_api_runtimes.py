"""/runtimes and /simulators through the test client: ingest (validated), list, versions, retraining."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.db.models import RuntimeRecordRow

API = "/api/v1"


def _runtimes(session: Session) -> int:
    with session.begin():
        return int(session.scalar(select(func.count()).select_from(RuntimeRecordRow)) or 0)


def test_ingest_runtime_and_list(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    body = {
        "model": "tiny-mlp",
        "cluster": "two-node",
        "strategy": specs.strategy("mine", ps=True),
        "iteration_times": [0.3, 0.2, 0.4, 0.5],
    }
    r = client.post(f"{API}/runtimes", json=body, headers=tokens["alice"])
    assert r.status_code == 201
    strategy = specs.strategy("mine", ps=True)
    for v in strategy["variables"]:  # stored normalised: every default spelled out
        v["partition"] = {"axis": 0, "shards": 1}
        v["shards"][0] |= {"local_replication": False, "staleness": 0}
    strategy |= {"model": None, "cluster": None, "plan": None}
    record = {
        "id": 1,
        "domain": "tiny-mlp__two-node",
        "model_name": "tiny-mlp",
        "cluster_name": "two-node",
        "strategy": strategy,
        "iteration_times": [0.3, 0.2, 0.4, 0.5],
        "median_time": pytest.approx(0.35),
        "source": "user",
        "search_id": None,
        "trial_id": None,
        "user_id": 1,
        "created_at": ANY,
        "measured_on": None,
        "site": None,
    }
    assert r.json() == record
    assert client.get(f"{API}/runtimes", headers=tokens["alice"]).json() == {
        "data": [record],
        "count": 1,
        "next_cursor": None,
    }
    assert (
        client.get(f"{API}/runtimes?domain=tiny-mlp__two-node", headers=tokens["alice"]).json()["count"] == 1
    )
    assert client.get(f"{API}/runtimes?domain=other__x", headers=tokens["alice"]).json()["count"] == 0
    assert client.get(f"{API}/runtimes?since_id=1", headers=tokens["alice"]).json()["count"] == 0
    assert client.get(f"{API}/runtimes", headers=tokens["bob"]).json()["count"] == 0
    assert client.get(f"{API}/runtimes", headers=tokens["admin"]).json()["count"] == 1


@pytest.mark.parametrize(
    ("change", "loc", "msg"),
    [
        ({"model": "nope"}, ["body", "model"], "no model 'nope'"),
        ({"iteration_times": []}, ["body", "iteration_times"], "at least 1 item"),
        ({"iteration_times": [0.2, -1.0]}, ["body", "iteration_times", 1], "greater than 0"),
        (
            {
                "strategy": {
                    "variables": [{"variable": "fc1.weight", "shards": [{"kind": "ps", "server": "n9"}]}]
                }
            },
            ["body", "strategy", "variables", 0, "shards", 0, "server"],
            "unknown node 'n9'",
        ),
        (
            {"strategy": {"variables": [{"variable": "ghost", "shards": [{"kind": "collective"}]}]}},
            ["body", "strategy", "variables", 0, "variable"],
            "unknown variable 'ghost'",
        ),
        ({"strategy": {"variables": []}}, ["body", "strategy", "variables"], "at least 1 item"),
    ],
)
def test_bad_runtime_is_422_with_field_path_and_stores_nothing(
    client: TestClient,
    tokens: dict[str, Any],
    specs: Any,
    session: Session,
    change: dict[str, Any],
    loc: list[Any],
    msg: str,
) -> None:
    body = {
        "model": "tiny-mlp",
        "cluster": "two-node",
        "strategy": specs.strategy(),
        "iteration_times": [0.3],
    }
    r = client.post(f"{API}/runtimes", json=body | change, headers=tokens["alice"])
    assert r.status_code == 422
    first = r.json()["detail"][0]
    assert first["loc"] == loc and msg in first["msg"], first
    assert _runtimes(session) == 0


def test_simulator_versions_and_retraining(
    client: TestClient, tokens: dict[str, Any], session: Session, hooks: Any
) -> None:
    assert client.get(f"{API}/simulators", headers=tokens["alice"]).json() == {
        "data": [],
        "count": 0,
        "next_cursor": None,
    }
    repo.add_simulator_version(
        session,
        domain="tiny-mlp__two-node",
        kind="gat",
        metrics={"kendall_tau": 0.7},
        path="/s/1.pt",
        n_records=12,
    )
    repo.add_simulator_version(
        session,
        domain="tiny-mlp__two-node",
        kind="gat",
        metrics={"kendall_tau": 0.8},
        path="/s/2.pt",
        n_records=20,
    )
    repo.add_simulator_version(session, domain="other__x", kind="rnn", metrics={}, path=None, n_records=3)
    v2 = {
        "id": 2,
        "domain": "tiny-mlp__two-node",
        "kind": "gat",
        "version": 2,
        "metrics": {"kendall_tau": 0.8},
        "path": "/s/2.pt",
        "n_records": 20,
        "created_at": ANY,
    }
    listed = client.get(f"{API}/simulators?domain=tiny-mlp__two-node", headers=tokens["alice"]).json()
    assert listed["count"] == 2 and listed["data"][1] == v2 and listed["data"][0]["version"] == 1
    assert client.get(f"{API}/simulators?kind=rnn", headers=tokens["alice"]).json()["data"][0]["version"] == 1
    assert client.get(f"{API}/simulators/2", headers=tokens["bob"]).json() == v2
    assert client.get(f"{API}/simulators/9", headers=tokens["bob"]).status_code == 404
    r = client.post(
        f"{API}/simulators/retrain", json={"domain": "tiny-mlp__two-node"}, headers=tokens["alice"]
    )
    assert r.status_code == 202
    req = {
        "id": 1,
        "domain": "tiny-mlp__two-node",
        "state": "pending",
        "requested_by": 1,
        "simulator_version_id": None,
        "error": None,
        "created_at": ANY,
        "finished_at": None,
    }
    assert r.json() == req
    # A second request while one is pending is the same request (not saying who made it).
    assert client.post(
        f"{API}/simulators/retrain", json={"domain": "tiny-mlp__two-node"}, headers=tokens["bob"]
    ).json() == req | {"requested_by": None}
    # Users see only their own requests (issue 20); admins see all.
    assert client.get(f"{API}/simulators/retrain", headers=tokens["bob"]).json() == {"data": [], "count": 0}
    for who in ("alice", "admin"):
        assert client.get(f"{API}/simulators/retrain", headers=tokens[who]).json() == {
            "data": [req],
            "count": 1,
        }
    assert hooks.calls == [("retrain_requested", 1), ("retrain_requested", 1)]
    r = client.post(f"{API}/simulators/retrain", json={"domain": "no-at-sign"}, headers=tokens["alice"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "domain"]
    assert (
        client.post(
            f"{API}/simulators/retrain", json={"domain": "a__b"}, headers=tokens["worker"]
        ).status_code
        == 403
    )
