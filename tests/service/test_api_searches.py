"""/searches through the test client: create, 422s storing nothing, status with speed-ups, cancel."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.db.models import SearchRow
from service.domain import CandidateDraft
from service.plans.results import RULE
from simulator.spec.measurement import Measurement

API = "/api/v1"
CREATE = {"model": "tiny-mlp", "cluster": "two-node", "trial_budget": 4, "candidates_per_round": 2}


def _searches(session: Session) -> int:
    with session.begin():
        return int(session.scalar(select(func.count()).select_from(SearchRow)) or 0)


def _search_json(**over: Any) -> dict[str, Any]:
    base = {
        "id": 1,
        "name": "",
        "owner_id": 1,
        "model_spec_id": 1,
        "cluster_spec_id": 2,
        "model_name": "tiny-mlp",
        "cluster_name": "two-node",
        "objective": "time",
        "trial_budget": 4,
        "candidates_per_round": 2,
        "samples_per_round": 200,
        "approval_required": False,
        "seed": 0,
        "compression": "none",
        "space": "lossless",
        "plan_kind": "sync",
        "plan_options": None,
        "model_factory": None,
        "state": "pending",
        "current_round": 0,
        "failure_reason": None,
        "created_at": ANY,
        "updated_at": ANY,
        "finished_at": None,
    }
    return base | over


def test_create_search_stores_pending_and_notifies(
    client: TestClient, tokens: dict[str, Any], hooks: Any
) -> None:
    r = client.post(
        f"{API}/searches", json=CREATE | {"name": "first", "objective": "cost"}, headers=tokens["alice"]
    )
    assert r.status_code == 201
    assert r.json() == _search_json(name="first", objective="cost")
    assert hooks.calls == [("search_created", 1)]
    listed = client.get(f"{API}/searches", headers=tokens["alice"]).json()
    assert listed == {"data": [_search_json(name="first", objective="cost")], "count": 1, "next_cursor": None}


def test_create_search_with_uploaded_specs_by_name_and_id(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    client.post(f"{API}/models", json=specs.model("tiny-mlp"), headers=tokens["alice"])  # shadows the zoo's
    cid = client.post(f"{API}/clusters", json=specs.cluster("lab"), headers=tokens["alice"]).json()["id"]
    r = client.post(f"{API}/searches", json={"model": "tiny-mlp", "cluster": cid}, headers=tokens["alice"])
    assert r.status_code == 201
    body = r.json()
    assert (body["model_spec_id"], body["cluster_spec_id"], body["cluster_name"]) == (1, cid, "lab")
    models = client.get(f"{API}/models/{body['model_spec_id']}", headers=tokens["alice"]).json()
    assert models["origin"] == "upload"


@pytest.mark.parametrize(
    ("change", "loc", "msg_part"),
    [
        ({"model": "nope"}, ["body", "model"], "no model 'nope'"),
        ({"cluster": "nope"}, ["body", "cluster"], "no cluster 'nope'"),
        ({"trial_budget": 0}, ["body", "trial_budget"], "greater than or equal to 1"),
        ({"objective": "speed"}, ["body", "objective"], "'time' or 'cost'"),
        ({"candidates_per_round": 300}, ["body"], "cannot exceed samples_per_round"),
        ({"colour": "red"}, ["body", "colour"], "Extra inputs"),
        ({"model": None}, ["body", "model"], "a name (a string) or an id (an integer)"),
        ({"model": 2**64}, ["body", "model"], "an id is between 1 and 2147483647"),
        ({"model": "a\x00b"}, ["body", "model"], "must not contain control characters"),
        ({"seed": 2**64}, ["body", "seed"], "less than or equal to 2147483647"),
        ({"samples_per_round": 1_000_000}, ["body", "samples_per_round"], "less than or equal to 10000"),
        ({"name": "tab\there"}, ["body", "name"], "must not contain control characters"),
    ],
)
def test_bad_search_is_422_with_field_path_and_stores_nothing(
    client: TestClient,
    tokens: dict[str, Any],
    session: Session,
    change: dict[str, Any],
    loc: list[Any],
    msg_part: str,
) -> None:
    r = client.post(f"{API}/searches", json=CREATE | change, headers=tokens["alice"])
    assert r.status_code == 422
    first = r.json()["detail"][0]
    assert first["loc"] == loc and msg_part in first["msg"]
    assert _searches(session) == 0


def test_users_see_only_their_own_searches(client: TestClient, tokens: dict[str, Any]) -> None:
    sid = client.post(f"{API}/searches", json=CREATE, headers=tokens["alice"]).json()["id"]
    for path in ("", "/rounds", "/candidates", "/trials"):
        r = client.get(f"{API}/searches/{sid}{path}", headers=tokens["bob"])
        assert r.status_code == 404 and r.json() == {"detail": f"no search {sid}"}
    assert client.post(f"{API}/searches/{sid}/cancel", headers=tokens["bob"]).status_code == 404
    assert client.get(f"{API}/searches", headers=tokens["bob"]).json() == {
        "data": [],
        "count": 0,
        "next_cursor": None,
    }
    assert client.get(f"{API}/searches/{sid}", headers=tokens["admin"]).status_code == 200
    assert client.get(f"{API}/searches", headers=tokens["admin"]).json()["count"] == 1
    assert client.get(f"{API}/searches", headers=tokens["worker"]).status_code == 403
    assert client.get(f"{API}/searches/999", headers=tokens["alice"]).status_code == 404


def _finish(session: Session, baseline: str | None, median: float, search_id: int) -> None:
    claim = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert claim is not None and claim.trial.baseline == baseline
    m = Measurement(iteration_times=(median, median)) if median else Measurement(failure="crashed")
    repo.report_trial(
        session, trial_id=claim.trial.id, attempt=claim.attempt, claim_token=claim.claim_token, measurement=m
    )


def _run(label: str, median: float) -> dict[str, Any]:
    return {"label": label, "space": "lossless", "median": pytest.approx(median)}


def test_lossy_search_is_an_explicit_opt_in(client: TestClient, tokens: dict[str, Any]) -> None:
    r = client.post(f"{API}/searches", json=CREATE | {"compression": "powersgd"}, headers=tokens["alice"])
    assert r.status_code == 201 and (r.json()["compression"], r.json()["space"]) == ("powersgd", "lossy")
    r = client.post(f"{API}/searches", json=CREATE | {"compression": "int8"}, headers=tokens["alice"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "compression"]


#: How the small strategies of conftest read (three variables, one all-reduce group).
ALLREDUCE = "3 shards all-reduce in 1 group(s)"


def test_status_reports_best_and_speedups(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    sid = client.post(f"{API}/searches", json=CREATE, headers=tokens["alice"]).json()["id"]
    repo.transition_search(session, search_id=sid, from_states=["pending"], to_state="running")
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("horovod"), baseline="horovod")
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("ps", ps=True), baseline="ps")
    _finish(session, "horovod", 0.6, sid)
    _finish(session, "ps", 0.9, sid)
    drafts = [
        CandidateDraft(rank=1, strategy=specs.strategy("a"), predicted_time=0.25, similarity=0.5),
        CandidateDraft(rank=2, strategy=specs.strategy("b", group=1), predicted_time=0.35, similarity=0.2),
    ]
    repo.add_round(session, search_id=sid, candidates=drafts, samples=200)
    _finish(session, None, 0.4, sid)
    _finish(session, None, 0.0, sid)  # a failed candidate trial counts as done, never as best
    r = client.get(f"{API}/searches/{sid}", headers=tokens["alice"])
    assert r.status_code == 200
    assert r.json() == {
        "search": _search_json(id=sid, state="running", current_round=1),
        "trials_by_state": {"queued": 0, "running": 0, "succeeded": 3, "failed": 1, "cancelled": 0},
        "candidate_trials_done": 2,
        "best_trial_id": 3,
        "best_candidate_id": 1,
        "best_time": 0.4,
        "baselines": [
            {"name": "horovod", "trial_id": 1, "state": "succeeded", "median_time": 0.6},
            {"name": "ps", "trial_id": 2, "state": "succeeded", "median_time": 0.9},
        ],
        "families": [
            {
                "family": "horovod",
                "lossy": False,
                "tuned": _run("horovod", 0.6),
                "untuned": _run("horovod", 0.6),
                "measured": 1,
                "members": ["horovod"],
            },
            {
                "family": "ps",
                "lossy": False,
                "tuned": _run("ps", 0.9),
                "untuned": _run("ps", 0.9),
                "measured": 1,
                "members": ["ps"],
            },
        ],
        "reports": [
            {
                "space": "lossless",
                "winner": _run("trial:3", 0.4),
                "ratios": [  # constant iteration times: the interval is the point
                    {
                        "family": "horovod",
                        "baseline": "horovod",
                        "ratio": pytest.approx(1.5),
                        "low": pytest.approx(1.5),
                        "high": pytest.approx(1.5),
                    },
                    {
                        "family": "ps",
                        "baseline": "ps",
                        "ratio": pytest.approx(2.25),
                        "low": pytest.approx(2.25),
                        "high": pytest.approx(2.25),
                    },
                ],
                "accuracy": "lossless",
            }
        ],
        "speedups": {"horovod": pytest.approx(1.5), "ps": pytest.approx(2.25)},
        "state_detail": None,  # nothing queued waits for a worker
        # one shape for every plan kind: the best vs the strongest tuned baseline (horovod)
        "result": {
            "plan_kind": "sync",
            "metric": "time",
            "best": {"trial_id": 3, "label": "trial:3", "description": ALLREDUCE, "value": 0.4},
            "baseline": {"trial_id": 1, "label": "horovod", "description": ALLREDUCE, "value": 0.6},
            "ratio": pytest.approx(1.5),
            "slower": False,
            "recommended": {"trial_id": 3, "label": "trial:3", "description": ALLREDUCE, "value": 0.4},
            "recommended_reason": "the fastest measured candidate is also the simplest within the noise",
            "verdict": "1.50x speed-up vs horovod (600.0 ms -> 400.0 ms)",
            "rule": RULE,
        },
    }
    rounds = client.get(f"{API}/searches/{sid}/rounds", headers=tokens["alice"]).json()
    assert rounds == {
        "data": [
            {
                "id": 1,
                "search_id": sid,
                "index": 1,
                "state": "running",
                "simulator_version_id": None,
                "simulator_kind": "analytical",
                "samples": 200,
                "created_at": ANY,
                "finished_at": None,
            }
        ],
        "count": 1,
        "next_cursor": None,
    }


def test_status_of_a_fresh_search_has_no_best(client: TestClient, tokens: dict[str, Any]) -> None:
    sid = client.post(f"{API}/searches", json=CREATE, headers=tokens["alice"]).json()["id"]
    body = client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()
    assert body == {
        "search": _search_json(),
        "trials_by_state": {"queued": 0, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0},
        "candidate_trials_done": 0,
        "best_trial_id": None,
        "best_candidate_id": None,
        "best_time": None,
        "baselines": [],
        "families": [],
        "reports": [],
        "speedups": {},
        "state_detail": None,
        "result": {
            "plan_kind": "sync",
            "metric": "time",
            "best": None,
            "baseline": None,
            "ratio": None,
            "slower": False,
            "recommended": None,
            "recommended_reason": "no measured candidate yet",
            "verdict": "no measured candidate yet",
            "rule": RULE,
        },
    }


def test_cancel_search(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any, hooks: Any
) -> None:
    sid = client.post(f"{API}/searches", json=CREATE, headers=tokens["alice"]).json()["id"]
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("horovod"), baseline="horovod")
    r = client.post(f"{API}/searches/{sid}/cancel", headers=tokens["alice"])
    assert r.status_code == 200
    assert r.json() == _search_json(id=sid, state="cancelled", finished_at=ANY)
    assert r.json()["finished_at"] is not None
    assert hooks.calls == [("search_created", sid), ("search_cancelled", sid)]
    trials = client.get(f"{API}/searches/{sid}/trials", headers=tokens["alice"]).json()["data"]
    assert [(t["state"], t["failure_reason"]) for t in trials] == [("cancelled", "search cancelled")]
    r = client.post(f"{API}/searches/{sid}/cancel", headers=tokens["alice"])
    assert r.status_code == 409 and r.json() == {"detail": f"search {sid} is already cancelled"}
