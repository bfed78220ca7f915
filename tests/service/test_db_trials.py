"""Trial persistence on SQLite and PostgreSQL: atomic claims, exactly-once reports, stale requeue."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from service.db import repository as repo
from service.db.models import MeasurementRow, RuntimeRecordRow, utcnow
from service.domain import CandidateDraft, Conflict
from simulator.spec.measurement import Measurement

OK = Measurement(iteration_times=(0.5, 0.4, 0.6))


def _count(session: Session, table: Any) -> int:
    with session.begin():
        return int(session.scalar(select(func.count()).select_from(table)) or 0)


def test_enqueue_is_idempotent_per_baseline(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of()
    a = repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("horovod"), baseline="horovod")
    b = repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("horovod"), baseline="horovod")
    assert a.id == b.id
    assert (a.state, a.attempt, a.baseline, a.candidate_id, a.cluster_name) == (
        "queued",
        0,
        "horovod",
        None,
        "two-node",
    )
    with pytest.raises(ValueError):
        repo.enqueue_trial(session, search_id=s.id, strategy={}, baseline="x", candidate_id=1)


def test_claim_gives_oldest_queued_trial_with_specs(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of()
    first = repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("b"), baseline="b")
    assert repo.claim_trial(session, worker="w", clusters=["other"]) is None
    assert repo.claim_trial(session, worker="w", clusters=[]) is None
    claim = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert claim is not None
    assert claim.trial.id == first.id
    assert (claim.trial.state, claim.attempt, claim.trial.claimed_by) == ("running", 1, "w")
    assert claim.trial.heartbeat_at is not None and claim.trial.started_at is not None
    assert len(claim.claim_token) == 32
    assert claim.model["name"] == "tiny-mlp" and claim.cluster["name"] == "two-node"
    assert claim.trial.strategy == specs.strategy("a")


def test_claim_of_a_named_trial(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    second = repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("b"), baseline="b")
    claim = repo.claim_trial(session, worker="w", clusters=["two-node"], trial_id=second.id)
    assert claim is not None and claim.trial.id == second.id
    assert repo.claim_trial(session, worker="w", clusters=["two-node"], trial_id=second.id) is None


def test_concurrent_claims_of_one_trial_have_one_winner(
    sessions: sessionmaker[Session], session: Session, search_of: Any, specs: Any
) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    results: list[Any] = []
    barrier = threading.Barrier(6)

    def claim(i: int) -> None:
        with sessions() as own:
            barrier.wait()
            results.append(repo.claim_trial(own, worker=f"w{i}", clusters=["two-node"]))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r is not None]
    assert len(results) == 6 and len(winners) == 1
    trial = repo.get_trial(session, trial_id=winners[0].trial.id)
    assert trial.claimed_by == winners[0].trial.claimed_by and trial.attempt == 1


def test_concurrent_claims_of_many_trials_never_share(
    sessions: sessionmaker[Session], session: Session, search_of: Any, specs: Any
) -> None:
    s = search_of()
    for i in range(10):
        repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy(str(i)), baseline=f"b{i}")
    got: list[int] = []
    lock = threading.Lock()

    def drain(i: int) -> None:
        with sessions() as own:
            while (c := repo.claim_trial(own, worker=f"w{i}", clusters=["two-node"])) is not None:
                with lock:
                    got.append(c.trial.id)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 11))


def test_report_records_exactly_one_measurement(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    c = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert c is not None
    first = repo.report_trial(
        session, trial_id=c.trial.id, attempt=c.attempt, claim_token=c.claim_token, measurement=OK
    )
    again = repo.report_trial(
        session,
        trial_id=c.trial.id,
        attempt=c.attempt,
        claim_token=c.claim_token,
        measurement=Measurement(iteration_times=(9.0,)),
    )
    assert first.recorded and not again.recorded
    assert first.trial.state == again.trial.state == "succeeded"
    assert again.trial.iteration_times == (0.5, 0.4, 0.6) and again.trial.median_time == 0.5
    assert again.trial.measurement is not None and again.trial.measurement["iteration_times"] == [
        0.5,
        0.4,
        0.6,
    ]
    assert again.trial.finished_at is not None and again.trial.failure_reason is None
    assert _count(session, MeasurementRow) == 1
    runtimes = repo.list_runtimes(session, domain="tiny-mlp__two-node")
    assert [(r.source, r.trial_id, r.median_time, r.search_id) for r in runtimes] == [
        ("trial", c.trial.id, 0.5, s.id)
    ]


def test_concurrent_duplicate_reports_record_once(
    sessions: sessionmaker[Session], session: Session, search_of: Any, specs: Any
) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    c = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert c is not None
    outcomes: list[bool] = []
    barrier = threading.Barrier(5)

    def report() -> None:
        with sessions() as own:
            barrier.wait()
            out = repo.report_trial(
                own, trial_id=c.trial.id, attempt=c.attempt, claim_token=c.claim_token, measurement=OK
            )
            outcomes.append(out.recorded)

    threads = [threading.Thread(target=report) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == [False, False, False, False, True]
    assert _count(session, MeasurementRow) == 1 and _count(session, RuntimeRecordRow) == 1


def test_failed_measurement_fails_the_trial_without_a_runtime(
    session: Session, search_of: Any, specs: Any
) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    c = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert c is not None
    out = repo.report_trial(
        session,
        trial_id=c.trial.id,
        attempt=1,
        claim_token=c.claim_token,
        measurement=Measurement(failure="OOM on n0"),
    )
    assert out.recorded and out.trial.state == "failed" and out.trial.failure_reason == "OOM on n0"
    assert out.trial.median_time is None and out.trial.iteration_times == ()
    assert _count(session, RuntimeRecordRow) == 0


def test_stale_trial_is_requeued_and_old_claim_cannot_report(
    session: Session, search_of: Any, specs: Any
) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    old = repo.claim_trial(session, worker="dead", clusters=["two-node"])
    assert old is not None
    assert repo.requeue_stale_trials(session, timeout_s=60) == []  # fresh heartbeat: untouched
    later = utcnow() + timedelta(seconds=61)
    (requeued,) = repo.requeue_stale_trials(session, timeout_s=60, now=later)
    assert (requeued.id, requeued.state, requeued.claimed_by, requeued.heartbeat_at) == (
        old.trial.id,
        "queued",
        None,
        None,
    )
    hb = repo.heartbeat(session, trial_id=old.trial.id, attempt=old.attempt, claim_token=old.claim_token)
    assert (hb.accepted, hb.stop) == (False, False)
    new = repo.claim_trial(session, worker="alive", clusters=["two-node"])
    assert new is not None and new.attempt == 2 and new.trial.id == old.trial.id
    stale = repo.report_trial(
        session, trial_id=old.trial.id, attempt=old.attempt, claim_token=old.claim_token, measurement=OK
    )
    assert not stale.recorded and stale.trial.state == "running" and stale.trial.claimed_by == "alive"
    fresh = repo.report_trial(
        session, trial_id=new.trial.id, attempt=2, claim_token=new.claim_token, measurement=OK
    )
    assert fresh.recorded and fresh.trial.state == "succeeded" and fresh.trial.attempt == 2
    assert _count(session, MeasurementRow) == 1


def test_trial_fails_after_max_attempts(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    later = utcnow() + timedelta(hours=1)
    for attempt in (1, 2):
        c = repo.claim_trial(session, worker=f"w{attempt}", clusters=["two-node"])
        assert c is not None and c.attempt == attempt
        assert [
            t.state for t in repo.requeue_stale_trials(session, timeout_s=1, max_attempts=2, now=later)
        ] == ["queued" if attempt < 2 else "failed"]
    trial = repo.list_trials(session, search_id=s.id)[0]
    assert trial.state == "failed" and trial.failure_reason == "heartbeat lost on 2 attempts (last: w2)"


def test_heartbeat_refreshes_and_reports_cancel(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("b"), baseline="b")
    c = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert c is not None
    before = repo.get_trial(session, trial_id=c.trial.id).heartbeat_at
    hb = repo.heartbeat(session, trial_id=c.trial.id, attempt=1, claim_token=c.claim_token)
    assert (hb.accepted, hb.stop) == (True, False)
    after = repo.get_trial(session, trial_id=c.trial.id).heartbeat_at
    assert before is not None and after is not None and after >= before
    assert not repo.heartbeat(session, trial_id=c.trial.id, attempt=1, claim_token="wrong").accepted
    cancelled = repo.cancel_search(session, search_id=s.id)
    assert cancelled.state == "cancelled" and cancelled.finished_at is not None
    hb = repo.heartbeat(session, trial_id=c.trial.id, attempt=1, claim_token=c.claim_token)
    assert (hb.accepted, hb.stop) == (True, True)
    states = {
        t.baseline: (t.state, t.stop_requested, t.failure_reason)
        for t in repo.list_trials(session, search_id=s.id)
    }
    assert states == {"a": ("running", True, None), "b": ("cancelled", False, "search cancelled")}
    out = repo.report_trial(
        session, trial_id=c.trial.id, attempt=1, claim_token=c.claim_token, measurement=OK
    )
    assert out.recorded and out.trial.state == "cancelled" and out.trial.failure_reason == "search cancelled"
    with pytest.raises(Conflict):
        repo.cancel_search(session, search_id=s.id)
    with pytest.raises(Conflict):
        repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("c"), baseline="c")


def test_stale_trial_of_cancelled_search_ends_cancelled(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of()
    repo.enqueue_trial(session, search_id=s.id, strategy=specs.strategy("a"), baseline="a")
    assert repo.claim_trial(session, worker="w", clusters=["two-node"]) is not None
    repo.cancel_search(session, search_id=s.id)
    (t,) = repo.requeue_stale_trials(session, timeout_s=1, now=utcnow() + timedelta(minutes=5))
    assert (t.state, t.failure_reason) == ("cancelled", "search cancelled")


def test_approved_round_candidates_become_claimable(session: Session, search_of: Any, specs: Any) -> None:
    s = search_of(approval_required=False)
    rnd, cands = repo.add_round(
        session,
        search_id=s.id,
        samples=50,
        candidates=[CandidateDraft(rank=1, strategy=specs.strategy("x"), predicted_time=0.3, similarity=0.1)],
    )
    c = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert c is not None
    assert (c.trial.candidate_id, c.trial.round_index, c.trial.predicted_time) == (
        cands[0].id,
        rnd.index,
        0.3,
    )
