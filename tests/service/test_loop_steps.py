"""The loop's state machine, step by step, on SQLite and PostgreSQL (no worker: trials are claimed and
reported through the data-access functions, as the API would). Each ``advance`` does one thing and
is idempotent; the search ends when the budget is spent and the baselines are measured."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from search.baselines import baseline_names, baseline_schedule, family_of
from search.space import space_of
from service.db import repository as repo
from service.loop import LoopConfig, SearchLoop
from service.loop.rounds import RoundConfig
from simulator.spec import Strategy, strategy_key
from simulator.spec.measurement import Measurement

CONFIG = LoopConfig(round=RoundConfig(qualified_fraction=0.5))
#: Measured medians of the baseline members (candidates take 0.1 + 0.01 x trial id).
SECONDS = {"horovod@64MiB": 0.5, "horovod@16MiB": 0.4, "horovod@4MiB": 0.6, "horovod@1MiB": 0.7,
           "ps-naive": 0.8, "ps@balanced": 0.9, "ps@part-4MiB": 1.0, "ps@part-256KiB": 1.1}  # fmt: skip
#: Seconds a step may wait for its job (baselines, a round's planning) in its own process.
WAIT = 120.0


def run_queued(sessions: sessionmaker[Session], seconds: dict[str, float] | None = None) -> list[int]:
    """Claim and report every queued trial as a worker would; returns the trial ids."""
    done = []
    with sessions() as s:
        while (claim := repo.claim_trial(s, worker="w", clusters=["two-node"])) is not None:
            t = claim.trial
            median = (seconds or {}).get(t.baseline or "", 0.1 + 0.01 * t.id)
            m = Measurement(iteration_times=(median, median, median))
            out = repo.report_trial(
                s, trial_id=t.id, attempt=claim.attempt, claim_token=claim.claim_token, measurement=m
            )
            assert out.recorded
            done.append(t.id)
    return done


def test_search_goes_through_rounds_to_completion(sessions: sessionmaker[Session], search_of: Any) -> None:
    search = search_of(trial_budget=3, candidates_per_round=2, samples_per_round=30)
    loop = SearchLoop(sessions, config=CONFIG)

    assert loop.advance(search.id, wait_s=WAIT) == "baselines queued"
    plan = baseline_schedule(baseline_names(), 2)  # 3 trials, 2 per round: 2 rounds
    with sessions() as s:
        baselines = repo.list_trials(s, search_id=search.id)
    assert [t.baseline for t in baselines] == [n for n in baseline_names() if plan[n] == 1]
    assert {"horovod@64MiB", "ps-naive"} <= {t.baseline for t in baselines}  # the untuned ones first
    assert loop.advance(search.id, wait_s=WAIT) == "round 1 planned"
    assert loop.advance(search.id, wait_s=WAIT) == "baselines queued"  # round 2's share, behind round 1
    assert loop.advance(search.id, wait_s=WAIT) == "round 1: 2 trials running"  # idempotent: nothing new
    with sessions() as s:
        assert len(repo.list_rounds(s, search_id=search.id)) == 1
        order = ["c" if t.candidate_id else "b" for t in repo.list_trials(s, search_id=search.id)]
    assert "".join(order) == "bbbbccbbbb"  # baselines interleaved with candidates, not all first

    assert len(run_queued(sessions, SECONDS)) == 10  # 8 baseline members + 2 candidates
    assert loop.advance(search.id, wait_s=WAIT) == "round 1 completed"
    assert loop.advance(search.id, wait_s=WAIT) == "retraining"  # the round's retraining request is pending
    loop.retrainer.poll()
    loop.retrainer.stop()  # wait for it: too few runtimes, so no new version
    assert loop.advance(search.id, wait_s=WAIT) == "round 2 planned"
    with sessions() as s:
        r2 = repo.list_candidates(s, search_id=search.id, round_index=2)
        r1 = repo.list_candidates(s, search_id=search.id, round_index=1)
    assert len(r2) == 1  # the budget's last trial
    assert not {strategy_key(c.strategy) for c in r2} & {strategy_key(c.strategy) for c in r1}

    run_queued(sessions)
    assert loop.advance(search.id, wait_s=WAIT) == "round 2 completed"
    loop.retrainer.poll()
    loop.retrainer.stop()
    assert loop.advance(search.id, wait_s=WAIT) == "completed"
    assert loop.advance(search.id, wait_s=WAIT) == "final"
    with sessions() as s:
        status = repo.search_status(s, search_id=search.id)
        retrains = repo.list_retrain_requests(s, domain=search.domain)
    assert status.search.state == "completed" and status.candidate_trials_done == 3
    # tuned = the fastest measured member (16 MiB here), never slower than Horovod's default 64 MiB
    assert status.best_time is not None
    assert status.speedups["horovod"] == 0.4 / status.best_time
    assert status.speedups["ps"] == 0.8 / status.best_time  # naive PS was the fastest PS here
    horovod = next(f for f in status.families if f.family == "horovod")
    assert horovod.tuned is not None and horovod.untuned is not None
    assert (horovod.tuned.label, horovod.untuned.label, horovod.measured) == (
        "horovod@16MiB",
        "horovod@64MiB",
        4,
    )
    assert [r.space for r in status.reports] == ["lossless"] and status.reports[0].accuracy == "lossless"
    assert [r.state for r in retrains] == ["done", "done"] and all(
        r.simulator_version_id is None for r in retrains
    )


def test_round_waits_for_approval(sessions: sessionmaker[Session], search_of: Any) -> None:
    search = search_of(trial_budget=2, candidates_per_round=2, samples_per_round=30, approval_required=True)
    loop = SearchLoop(sessions, config=CONFIG)
    loop.advance(search.id, wait_s=WAIT)
    assert loop.advance(search.id, wait_s=WAIT) == "round 1 planned"
    assert loop.advance(search.id, wait_s=WAIT) == "awaiting approval"
    with sessions() as s:
        cands = repo.list_candidates(s, search_id=search.id)
        assert all(c.status == "proposed" for c in cands)
        assert [t.baseline for t in repo.list_trials(s, search_id=search.id)] == list(baseline_names())
        repo.decide_candidate(s, candidate_id=cands[0].id, approve=True)
        repo.decide_candidate(s, candidate_id=cands[1].id, approve=False)
    assert loop.advance(search.id, wait_s=WAIT) == "round 1: 1 trials running"
    run_queued(sessions)
    assert loop.advance(search.id, wait_s=WAIT) == "round 1 completed"
    loop.retrainer.poll()
    loop.retrainer.stop()
    # one trial of a budget of two ran: a second round proposes the last one
    assert loop.advance(search.id, wait_s=WAIT) == "round 2 planned"


def test_cancelled_search_is_left_alone(sessions: sessionmaker[Session], search_of: Any) -> None:
    search = search_of(trial_budget=2, candidates_per_round=1, samples_per_round=10)
    loop = SearchLoop(sessions, config=CONFIG)
    loop.advance(search.id, wait_s=WAIT)
    with sessions() as s:
        repo.cancel_search(s, search_id=search.id)
    assert loop.advance(search.id, wait_s=WAIT) == "final"
    with sessions() as s:
        trials = repo.list_trials(s, search_id=search.id)
    assert {t.state for t in trials} == {"cancelled"}


def test_sweep_requeues_a_stale_trial(sessions: sessionmaker[Session], search_of: Any) -> None:
    search = search_of(trial_budget=1, candidates_per_round=1, samples_per_round=10)
    loop = SearchLoop(sessions, config=LoopConfig(heartbeat_timeout_s=0.01))
    loop.advance(search.id, wait_s=WAIT)
    with sessions() as s:
        claim = repo.claim_trial(s, worker="dead", clusters=["two-node"])
    assert claim is not None
    time.sleep(0.05)
    changed = loop.sweep()
    assert [(t.id, t.state, t.attempt) for t in changed] == [(claim.trial.id, "queued", 1)]


def test_lossy_opt_in_adds_lossy_baselines_and_lossy_candidates(
    sessions: sessionmaker[Session], search_of: Any
) -> None:
    """compression='fp16': the Horovod+fp16 family is measured too, and candidates may use fp16;
    the default search (above) never sees either."""
    search = search_of(trial_budget=4, candidates_per_round=4, samples_per_round=60, compression="fp16")
    loop = SearchLoop(sessions, config=CONFIG)
    assert loop.advance(search.id, wait_s=WAIT) == "baselines queued"
    assert loop.advance(search.id, wait_s=WAIT) == "round 1 planned"
    with sessions() as s:
        trials = repo.list_trials(s, search_id=search.id)
    assert [t.baseline for t in trials if t.baseline] == list(baseline_names("fp16"))
    assert any(family_of(t.baseline) == "horovod-fp16" for t in trials if t.baseline)
    kinds = {
        sync.get("compressor", {}).get("kind", "none")
        for t in trials
        if t.candidate_id is not None
        for vs in t.strategy["variables"]
        for sync in vs["shards"]
    }
    assert kinds == {"none", "fp16"}  # seeded: the opted-in space really offers fp16
    run_queued(sessions)
    with sessions() as s:
        status = repo.search_status(s, search_id=search.id)
    assert {f.family for f in status.families} == {"horovod", "ps", "horovod-fp16"}
    lossy = [r for r in status.reports if r.space == "lossy"]
    assert lossy and lossy[0].accuracy == "lossy, accuracy not verified"
    assert lossy[0].winner is not None
    # a lossy search keeps half of each round lossless, so its lossless winner is reported too
    spaces = sorted(
        space_of(Strategy.model_validate(t.strategy)) for t in trials if t.candidate_id is not None
    )
    assert spaces == ["lossless", "lossless", "lossy", "lossy"]
    (lossless,) = [r for r in status.reports if r.space == "lossless"]
    assert lossless.winner is not None and {r.family for r in lossless.ratios} == {"horovod", "ps"}
    assert [r.family for r in lossy[0].ratios] == ["horovod-fp16"]  # lossy only against lossy
