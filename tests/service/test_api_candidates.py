"""/searches/{id}/candidates and /candidates/{id}/approve|reject through the test client."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.domain import CandidateDraft

API = "/api/v1"


def _search_with_round(
    client: TestClient, headers: dict[str, str], session: Session, specs: Any, approval: bool
) -> int:
    body = {
        "model": "tiny-mlp",
        "cluster": "two-node",
        "candidates_per_round": 2,
        "approval_required": approval,
    }
    sid = int(client.post(f"{API}/searches", json=body, headers=headers).json()["id"])
    repo.transition_search(session, search_id=sid, from_states=["pending"], to_state="running")
    drafts = [
        CandidateDraft(
            rank=2,
            strategy=specs.strategy("b", group=1),
            predicted_time=0.35,
            similarity=0.2,
            scorer="hybrid",
            uncertainty=0.07,
        ),
        CandidateDraft(rank=1, strategy=specs.strategy("a"), predicted_time=0.25, similarity=0.5),
    ]
    repo.add_round(session, search_id=sid, candidates=drafts, samples=100)
    return sid


def _candidate(id: int, rank: int, status: str, sid: int = 1, **over: Any) -> dict[str, Any]:
    label, group, predicted, sim = ("a", 0, 0.25, 0.5) if rank == 1 else ("b", 1, 0.35, 0.2)
    names = ("fc1.weight", "fc1.bias", "fc2.weight")
    strategy = {
        "kind": "strategy",
        "name": label,
        "variables": [{"variable": n, "shards": [{"kind": "collective", "group": group}]} for n in names],
    }
    base = {
        "id": id,
        "search_id": sid,
        "round_index": 1,
        "rank": rank,
        "strategy": strategy,
        "predicted_time": predicted,
        "similarity": sim,
        "status": status,
        "decided_at": None if status == "proposed" else ANY,
        # rank 2 was ranked by the hybrid scorer (its draft says so); rank 1 by the default
        "scorer": "analytical" if rank == 1 else "hybrid",
        "uncertainty": None if rank == 1 else 0.07,
    }
    return base | over


def test_list_candidates_by_round_and_rank(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    sid = _search_with_round(client, tokens["alice"], session, specs, approval=True)
    r = client.get(f"{API}/searches/{sid}/candidates", headers=tokens["alice"])
    assert r.status_code == 200
    assert r.json() == {
        "data": [_candidate(1, 1, "proposed"), _candidate(2, 2, "proposed")],
        "count": 2,
        "next_cursor": None,
    }
    assert (
        client.get(f"{API}/searches/{sid}/candidates?round=1", headers=tokens["alice"]).json()["count"] == 2
    )
    assert client.get(f"{API}/searches/{sid}/candidates?round=2", headers=tokens["alice"]).json() == {
        "data": [],
        "count": 0,
        "next_cursor": None,
    }
    r = client.get(f"{API}/searches/{sid}/candidates?round=0", headers=tokens["alice"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "round"]
    assert client.get(f"{API}/candidates/2", headers=tokens["alice"]).json() == _candidate(2, 2, "proposed")
    assert client.get(f"{API}/candidates/2", headers=tokens["bob"]).status_code == 404
    assert client.get(f"{API}/candidates/99", headers=tokens["alice"]).status_code == 404
    status = client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()["search"]
    assert (status["state"], status["current_round"]) == ("awaiting_approval", 1)


def test_approve_queues_trial_and_reject_does_not(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any, hooks: Any
) -> None:
    sid = _search_with_round(client, tokens["alice"], session, specs, approval=True)
    r = client.post(f"{API}/candidates/1/approve", headers=tokens["alice"])
    assert r.status_code == 200
    body = r.json()
    assert body["candidate"] == _candidate(1, 1, "approved")
    assert body["trial"] == {
        "id": 1,
        "search_id": sid,
        "round_index": 1,
        "candidate_id": 1,
        "baseline": None,
        "cluster_name": "two-node",
        "strategy": body["candidate"]["strategy"],
        "predicted_time": 0.25,
        "state": "queued",
        "attempt": 0,
        "claimed_by": None,
        "heartbeat_at": None,
        "stop_requested": False,
        "failure_reason": None,
        "iteration_times": [],
        "median_time": None,
        "measurement": None,
        "created_at": ANY,
        "started_at": None,
        "finished_at": None,
    }
    # Still one proposed candidate: the search waits.
    assert (
        client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()["search"]["state"]
        == "awaiting_approval"
    )
    # Approving again is a no-op; rejecting an approved one is a conflict.
    assert client.post(f"{API}/candidates/1/approve", headers=tokens["alice"]).json()["trial"]["id"] == 1
    r = client.post(f"{API}/candidates/1/reject", headers=tokens["alice"])
    assert r.status_code == 409 and r.json() == {"detail": "candidate 1 was already approved"}
    r = client.post(f"{API}/candidates/2/reject", headers=tokens["alice"])
    assert r.status_code == 200 and r.json() == {"candidate": _candidate(2, 2, "rejected"), "trial": None}
    assert client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()["search"]["state"] == "running"
    trials = client.get(f"{API}/searches/{sid}/trials", headers=tokens["alice"]).json()
    assert [t["candidate_id"] for t in trials["data"]] == [1]
    rounds = client.get(f"{API}/searches/{sid}/rounds", headers=tokens["alice"]).json()["data"]
    assert rounds[0]["state"] == "running"
    assert hooks.calls == [("search_created", sid), ("candidate_decided", 1), ("candidate_decided", 2)]


def test_decisions_are_refused_without_approval_or_for_others(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    sid = _search_with_round(client, tokens["alice"], session, specs, approval=False)
    cands = client.get(f"{API}/searches/{sid}/candidates", headers=tokens["alice"]).json()["data"]
    assert [c["status"] for c in cands] == ["approved", "approved"]  # no approval needed: approved and queued
    assert [
        t["state"] for t in client.get(f"{API}/searches/{sid}/trials", headers=tokens["alice"]).json()["data"]
    ] == [
        "queued",
        "queued",
    ]
    r = client.post(f"{API}/candidates/1/reject", headers=tokens["alice"])
    assert r.status_code == 409 and r.json() == {"detail": f"search {sid} does not require approval"}
    sid2 = _search_with_round(client, tokens["alice"], session, specs, approval=True)
    cid = client.get(f"{API}/searches/{sid2}/candidates", headers=tokens["alice"]).json()["data"][0]["id"]
    assert client.post(f"{API}/candidates/{cid}/approve", headers=tokens["bob"]).status_code == 404
    assert client.post(f"{API}/candidates/{cid}/approve", headers=tokens["worker"]).status_code == 403
    client.post(f"{API}/searches/{sid2}/cancel", headers=tokens["alice"])
    r = client.post(f"{API}/candidates/{cid}/approve", headers=tokens["alice"])
    assert r.status_code == 409 and r.json() == {"detail": f"search {sid2} is already cancelled"}
    assert client.post(f"{API}/candidates/999/approve", headers=tokens["alice"]).status_code == 404
