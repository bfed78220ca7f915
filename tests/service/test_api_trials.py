"""/trials and /workers through the test client: claim, heartbeat, report once, roles, 422s."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.db.models import MeasurementRow

API = "/api/v1"
TIMES = [0.52, 0.5, 0.51]


def _measurements(session: Session) -> int:
    with session.begin():
        return int(session.scalar(select(func.count()).select_from(MeasurementRow)) or 0)


def test_claim_heartbeat_report(
    client: TestClient, tokens: dict[str, Any], queued: int, specs: Any, session: Session, hooks: Any
) -> None:
    w = tokens["worker"]
    r = client.post(f"{API}/workers/claim", json={"clusters": ["other"]}, headers=w)
    assert r.status_code == 204 and r.content == b""
    r = client.post(
        f"{API}/workers/claim",
        json={"clusters": ["two-node"], "worker": "host-a", "pool": "testbed"},
        headers=w,
    )
    assert r.status_code == 200
    claim = r.json()
    assert set(claim) == {"trial", "attempt", "claim_token", "model", "cluster", "model_factory"}
    assert claim["model_factory"] is None  # a search of the ModelSpec's layers
    assert claim["attempt"] == 1 and len(claim["claim_token"]) == 32
    assert claim["model"]["name"] == "tiny-mlp" and claim["cluster"]["name"] == "two-node"
    assert claim["model"]["layers"][1]["inputs"] == ["fc1"]
    running = {
        "id": 1,
        "search_id": queued,
        "round_index": None,
        "candidate_id": None,
        "baseline": "horovod",
        "cluster_name": "two-node",
        "strategy": specs.strategy("horovod"),
        "predicted_time": None,
        "state": "running",
        "attempt": 1,
        "claimed_by": "host-a",
        "heartbeat_at": ANY,
        "stop_requested": False,
        "failure_reason": None,
        "iteration_times": [],
        "median_time": None,
        "measurement": None,
        "created_at": ANY,
        "started_at": ANY,
        "finished_at": None,
    }
    assert claim["trial"] == running
    assert client.post(f"{API}/workers/claim", json={"clusters": ["two-node"]}, headers=w).status_code == 204
    ident = {"attempt": 1, "claim_token": claim["claim_token"], "worker": "host-a"}
    r = client.post(f"{API}/trials/1/heartbeat", json=ident, headers=w)
    assert r.status_code == 200 and r.json() == {"accepted": True, "stop": False}
    r = client.post(f"{API}/trials/1/heartbeat", json=ident | {"claim_token": "x" * 32}, headers=w)
    assert r.json() == {"accepted": False, "stop": False}
    report = ident | {"measurement": {"iteration_times": TIMES, "warmup": 2}}
    r = client.post(f"{API}/trials/1/report", json=report, headers=w)
    assert r.status_code == 200
    done = running | {
        "state": "succeeded",
        "finished_at": ANY,
        "iteration_times": TIMES,
        "median_time": 0.51,
        "measurement": ANY,
    }
    assert r.json() == {"recorded": True, "trial": done}
    assert r.json()["trial"]["measurement"] == {
        "iteration_times": TIMES,
        "compute_times": [],
        "sync_wait_times": [],
        "warmup": 2,
        "failure": None,
        "scale": 1.0,
        "compute_mode": "replay",
        "backend": "gloo",
        "environment": {},
        "details": {},
    }
    # A redelivered report changes nothing and records no second measurement.
    again = client.post(
        f"{API}/trials/1/report", json=ident | {"measurement": {"iteration_times": [9.0]}}, headers=w
    )
    assert again.status_code == 200 and again.json() == {"recorded": False, "trial": done}
    assert again.json()["trial"]["iteration_times"] == TIMES
    assert _measurements(session) == 1
    assert hooks.calls == [("search_created", queued), ("trial_finished", 1)]
    assert client.get(f"{API}/trials/1", headers=tokens["alice"]).json() == done
    listed = client.get(f"{API}/searches/{queued}/trials", headers=tokens["alice"]).json()
    assert listed == {"data": [done], "count": 1, "next_cursor": None}
    assert (
        client.get(f"{API}/searches/{queued}/trials?state=queued", headers=tokens["alice"]).json()["count"]
        == 0
    )
    workers = client.get(f"{API}/workers", headers=tokens["admin"]).json()
    # People see the workers too (the dashboard's liveness view); the same list for a user.
    assert client.get(f"{API}/workers", headers=tokens["alice"]).json() == workers
    # Most recently seen first (host-a's trial heartbeats came after worker-1's claim); unnamed
    # claims use the token's user name; the trial is finished, so neither holds one.
    assert workers == {
        "data": [
            {
                "id": 2,
                "name": "host-a",
                "user_id": 3,
                "pool": "testbed",
                "clusters": ["two-node"],
                "last_seen_at": ANY,
                "live": True,
                "current_trial_id": None,
            },
            {
                "id": 1,
                "name": "worker-1",
                "user_id": 3,
                "pool": "",
                "clusters": ["two-node"],
                "last_seen_at": ANY,
                "live": True,
                "current_trial_id": None,
            },
        ],
        "count": 2,
    }


def test_failed_trial_reports_its_reason(client: TestClient, tokens: dict[str, Any], queued: int) -> None:
    w = tokens["worker"]
    claim = client.post(f"{API}/workers/claim", json={"clusters": ["two-node"]}, headers=w).json()
    assert claim["trial"]["claimed_by"] == "worker-1"  # default worker name: the token's user
    ident = {"attempt": claim["attempt"], "claim_token": claim["claim_token"]}
    r = client.post(
        f"{API}/trials/1/report", json=ident | {"measurement": {"failure": "CUDA out of memory"}}, headers=w
    )
    trial = r.json()["trial"]
    assert (trial["state"], trial["failure_reason"], trial["iteration_times"], trial["median_time"]) == (
        "failed",
        "CUDA out of memory",
        [],
        None,
    )


def test_worker_endpoints_are_for_workers_only(
    client: TestClient, tokens: dict[str, Any], queued: int
) -> None:
    ident = {"attempt": 1, "claim_token": "t"}
    # A person's token may run a worker (their own searches: tests/service/test_trial_routing.py):
    # claim, heartbeat and report answer it like a worker token; the agents' endpoints do not.
    assert (
        client.post(
            f"{API}/workers/claim", json={"clusters": ["two-node"]}, headers=tokens["bob"]
        ).status_code
        == 204
    )
    for who in ("alice", "admin"):
        r = client.post(f"{API}/trials/1/heartbeat", json=ident, headers=tokens[who])
        assert r.status_code == 200 and r.json() == {"accepted": False, "stop": False}
        r = client.post(f"{API}/agents/a1/claim", headers=tokens[who])
        assert r.status_code == 403 and r.json() == {
            "detail": f"this endpoint is for worker tokens, not {'user' if who == 'alice' else 'admin'}"
        }
    assert client.post(f"{API}/workers/claim", json={"clusters": ["two-node"]}).status_code == 401
    # Workers cannot read people's data or list workers.
    for path in (
        f"/searches/{queued}",
        "/searches",
        "/trials/1",
        f"/searches/{queued}/trials",
        "/runtimes",
        "/simulators",
        "/workers",
    ):
        assert client.get(f"{API}{path}", headers=tokens["worker"]).status_code == 403, path
    assert client.get(f"{API}/trials/1", headers=tokens["bob"]).status_code == 404
    assert client.get(f"{API}/trials/99", headers=tokens["alice"]).status_code == 404


def test_bad_worker_requests_are_422_and_change_nothing(
    client: TestClient, tokens: dict[str, Any], queued: int, session: Session
) -> None:
    w = tokens["worker"]
    r = client.post(f"{API}/workers/claim", json={"clusters": []}, headers=w)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "clusters"]
    claim = client.post(f"{API}/workers/claim", json={"clusters": ["two-node"]}, headers=w).json()
    ident = {"attempt": claim["attempt"], "claim_token": claim["claim_token"]}
    bad = ident | {"measurement": {"iteration_times": [0.5, "slow"]}}
    r = client.post(f"{API}/trials/1/report", json=bad, headers=w)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == [
        "body",
        "measurement",
        "iteration_times",
        1,
    ]
    r = client.post(f"{API}/trials/1/report", json=ident | {"measurement": {"scale": 0}}, headers=w)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "measurement", "scale"]
    r = client.post(f"{API}/trials/1/heartbeat", json={"attempt": 0, "claim_token": "t"}, headers=w)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "attempt"]
    assert _measurements(session) == 0
    assert client.get(f"{API}/trials/1", headers=tokens["alice"]).json()["state"] == "running"
    r = client.post(f"{API}/trials/99/report", json=ident | {"measurement": {}}, headers=w)
    assert r.status_code == 404
    assert client.post(f"{API}/trials/99/heartbeat", json=ident, headers=w).status_code == 404


def test_cancelled_search_tells_the_worker_to_stop(
    client: TestClient, tokens: dict[str, Any], queued: int
) -> None:
    w = tokens["worker"]
    claim = client.post(f"{API}/workers/claim", json={"clusters": ["two-node"]}, headers=w).json()
    client.post(f"{API}/searches/{queued}/cancel", headers=tokens["alice"])
    ident = {"attempt": claim["attempt"], "claim_token": claim["claim_token"]}
    assert client.post(f"{API}/trials/1/heartbeat", json=ident, headers=w).json() == {
        "accepted": True,
        "stop": True,
    }
    r = client.post(f"{API}/trials/1/report", json=ident | {"measurement": {"failure": "stopped"}}, headers=w)
    assert (r.json()["trial"]["state"], r.json()["trial"]["failure_reason"]) == (
        "cancelled",
        "search cancelled; stopped",
    )


def test_claim_of_a_named_trial_through_the_api(
    client: TestClient, tokens: dict[str, Any], queued: int, session: Session, specs: Any
) -> None:
    repo.enqueue_trial(session, search_id=queued, strategy=specs.strategy("ps", ps=True), baseline="ps")
    r = client.post(
        f"{API}/workers/claim", json={"clusters": ["two-node"], "trial_id": 2}, headers=tokens["worker"]
    )
    assert r.status_code == 200 and r.json()["trial"]["baseline"] == "ps"
