"""Data-access functions on SQLite and PostgreSQL: tokens, specs, searches, rounds, decisions, runtimes."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.db.models import TokenRow
from service.domain import CandidateDraft, Conflict, NotFound
from simulator.spec import ModelSpec, Strategy
from simulator.spec.io import parse_as


def test_tokens_are_stored_hashed_and_verify(session: Session) -> None:
    issued = repo.create_token(session, name="alice", role="user")
    with session.begin():
        row = session.scalars(select(TokenRow)).one()
        assert row.token_hash == repo.hash_secret(issued.secret) != issued.secret
        assert row.prefix == issued.secret[:12] == issued.info.prefix
    p = repo.verify_token(session, secret=issued.secret)
    assert p is not None and (p.name, p.role, p.user_id, p.token_id) == ("alice", "user", 1, 1)
    assert repo.verify_token(session, secret=issued.secret + "x") is None
    second = repo.create_token(session, name="alice", role="user")
    assert second.info.user_id == 1 and second.secret != issued.secret
    with pytest.raises(Conflict):
        repo.create_token(session, name="alice", role="admin")
    with pytest.raises(ValueError):
        repo.create_token(session, name="x", role="boss")  # type: ignore[arg-type]
    repo.revoke_token(session, token_id=1)
    assert repo.verify_token(session, secret=issued.secret) is None
    assert repo.verify_token(session, secret=second.secret) is not None
    assert [t.revoked for t in repo.list_tokens(session)] == [True, False]
    with pytest.raises(NotFound):
        repo.revoke_token(session, token_id=99)


def test_specs_store_zoo_copy_and_resolve(session: Session, zoo_dir: Any, specs: Any) -> None:
    user = repo.create_token(session, name="alice", role="user").info.user_id
    zoo_copy = repo.zoo_spec(session, kind="model", name="tiny-mlp")
    assert (zoo_copy.origin, zoo_copy.owner_id) == ("zoo", None)
    assert repo.zoo_spec(session, kind="model", name="tiny-mlp").id == zoo_copy.id
    assert repo.resolve_spec(session, kind="model", ref="tiny-mlp", owner_id=user).id == zoo_copy.id
    own = repo.store_spec(session, spec=parse_as(ModelSpec, specs.model("tiny-mlp")), owner_id=user)
    assert repo.resolve_spec(session, kind="model", ref="tiny-mlp", owner_id=user).id == own.id  # own first
    assert repo.resolve_spec(session, kind="model", ref=own.id, owner_id=user).model_spec().name == "tiny-mlp"
    with pytest.raises(NotFound):
        repo.resolve_spec(session, kind="model", ref="nope", owner_id=user)
    with pytest.raises(NotFound):
        repo.get_spec(session, spec_id=own.id, viewer_id=user + 1)
    assert [s.id for s in repo.list_specs(session, kind="model", viewer_id=None)] == [own.id]


def test_round_with_approval_and_decisions(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of(approval_required=True, candidates_per_round=2)
    assert (
        repo.transition_search(session, search_id=s.id, from_states=["pending"], to_state="running")
        is not None
    )
    assert (
        repo.transition_search(session, search_id=s.id, from_states=["pending"], to_state="running") is None
    )
    drafts = [
        CandidateDraft(rank=1, strategy=specs.strategy("a"), predicted_time=0.2, similarity=0.9),
        CandidateDraft(rank=2, strategy=specs.strategy("b"), predicted_time=0.3, similarity=0.1),
    ]
    rnd, cands = repo.add_round(session, search_id=s.id, candidates=drafts, samples=64, simulator_kind="gat")
    assert (rnd.index, rnd.state, rnd.samples, rnd.simulator_kind) == (1, "awaiting_approval", 64, "gat")
    assert [c.status for c in cands] == ["proposed", "proposed"]
    assert parse_as(Strategy, cands[0].strategy).name == "a"
    assert repo.get_search(session, search_id=s.id).state == "awaiting_approval"
    assert repo.list_trials(session, search_id=s.id) == []
    cand, trial = repo.decide_candidate(session, candidate_id=cands[0].id, approve=True)
    assert cand.status == "approved" and trial is not None and trial.state == "queued"
    cand, trial = repo.decide_candidate(session, candidate_id=cands[1].id, approve=False)
    assert cand.status == "rejected" and trial is None
    assert repo.get_search(session, search_id=s.id).state == "running"
    assert repo.list_rounds(session, search_id=s.id)[0].state == "running"
    done = repo.set_round_state(session, round_id=rnd.id, state="completed")
    assert done.finished_at is not None
    rnd2, _ = repo.add_round(session, search_id=s.id, candidates=drafts, samples=64)
    assert rnd2.index == 2 and repo.get_search(session, search_id=s.id).current_round == 2
    with pytest.raises(ValueError):
        repo.add_round(session, search_id=s.id, candidates=[drafts[0], drafts[0]], samples=1)
    finished = repo.transition_search(
        session,
        search_id=s.id,
        from_states=["running", "awaiting_approval"],
        to_state="failed",
        failure_reason="boom",
    )
    assert finished is not None and finished.failure_reason == "boom" and finished.finished_at is not None
    with pytest.raises(ValueError):
        repo.transition_search(session, search_id=s.id, from_states=["failed"], to_state="running")
    with pytest.raises(Conflict):
        repo.add_round(session, search_id=s.id, candidates=drafts, samples=1)


def test_searches_are_listed_per_owner_and_state(session: Session, search_of: Any) -> None:
    a = search_of("alice")
    b = search_of("bob")
    assert [s.id for s in repo.list_searches(session)] == [b.id, a.id]
    assert [s.id for s in repo.list_searches(session, owner_id=a.owner_id)] == [a.id]
    repo.cancel_search(session, search_id=b.id)
    assert [s.id for s in repo.list_searches(session, states=["pending"])] == [a.id]
    with pytest.raises(NotFound):
        repo.get_search(session, search_id=a.id, owner_id=b.owner_id)
    assert a.domain == "tiny-mlp__two-node"


def test_runtimes_simulators_and_retrain_requests(session: Session, specs: Any) -> None:
    strategy = parse_as(Strategy, specs.strategy())
    with pytest.raises(ValueError):
        repo.ingest_runtime(
            session, model_name="m", cluster_name="c", strategy=strategy, iteration_times=[], user_id=None
        )
    r1 = repo.ingest_runtime(
        session, model_name="m", cluster_name="c", strategy=strategy, iteration_times=[3, 1, 2], user_id=None
    )
    repo.ingest_runtime(
        session, model_name="m", cluster_name="d", strategy=strategy, iteration_times=[1], user_id=None
    )
    assert (r1.domain, r1.median_time, r1.source) == ("m__c", 2.0, "user")
    assert [r.id for r in repo.list_runtimes(session, domain="m__c")] == [r1.id]
    assert repo.count_runtimes(session, domain="m__c") == 1
    assert [r.domain for r in repo.list_runtimes(session, since_id=r1.id)] == ["m__d"]
    assert repo.latest_simulator_version(session, domain="m__c") is None
    v1 = repo.add_simulator_version(
        session, domain="m__c", kind="gat", metrics={"tau": 0.5}, path=None, n_records=1
    )
    v2 = repo.add_simulator_version(
        session, domain="m__c", kind="gat", metrics={"tau": 0.6}, path="p", n_records=2
    )
    r = repo.add_simulator_version(session, domain="m__c", kind="rnn", metrics={}, path=None, n_records=2)
    assert (v1.version, v2.version, r.version) == (1, 2, 1)
    latest = repo.latest_simulator_version(session, domain="m__c", kind="gat")
    assert latest is not None and latest.id == v2.id
    req = repo.request_retrain(session, domain="m__c", requested_by=None)
    assert repo.request_retrain(session, domain="m__c", requested_by=None).id == req.id
    taken = repo.start_retrain(session, request_id=req.id)
    assert taken is not None and taken.state == "running"
    assert repo.start_retrain(session, request_id=req.id) is None
    assert repo.request_retrain(session, domain="m__c", requested_by=None).id != req.id  # none pending now
    done = repo.finish_retrain(session, request_id=req.id, simulator_version_id=v2.id)
    assert (done.state, done.simulator_version_id, done.error) == ("done", v2.id, None)
    with pytest.raises(Conflict):
        repo.finish_retrain(session, request_id=req.id, simulator_version_id=None)
    assert [q.state for q in repo.list_retrain_requests(session, domain="m__c")] == ["done", "pending"]
