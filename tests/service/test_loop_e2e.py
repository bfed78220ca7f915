"""The search loop end to end: API + loop + embedded SQLite queue + a real testbed worker process.

A small model on a two-node cluster, two rounds of two candidates, short trials. Checks every
number a reader can recompute from the trials: one measurement per trial, the best trial, the
speed-ups over the baselines, rounds scored and completed in order; then floods the queue with
duplicated nudges for every trial and checks nothing is measured twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from search.baselines import baseline_names, family_of
from service.client import StrategistClient
from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.settings import Settings

WORKER_FLAGS = {"iterations": 3, "warmup": 1, "heartbeat": 0.5, "poll": 0.5, "clusters": "two-node"}


@pytest.fixture
def stack(tmp_path: Path, zoo_dir: Path) -> Iterator[Stack]:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url="",
        broker_url="",
        heartbeat_timeout_s=10.0,
        sweep_interval_s=1.0,
    )
    with Stack(settings, StackConfig(worker_flags=WORKER_FLAGS, port=0, tick_s=0.3)) as s:
        yield s


def user_client(stack: Stack, name: str = "alice") -> StrategistClient:
    with stack.sessions() as session:
        secret = repo.create_token(session, name=name, role="user").secret
    return StrategistClient(stack.url, secret)


def test_search_runs_two_rounds_and_measures_each_trial_once(stack: Stack) -> None:
    client = user_client(stack)
    ready = httpx.get(stack.url + "/readyz").json()
    assert ready["status"] == "ready", ready
    sid = client.create_search(
        model="tiny-mlp",
        cluster="two-node",
        trial_budget=4,
        candidates_per_round=2,
        samples_per_round=40,
        seed=3,
    ).id
    progress: list[int] = []  # the pipeline's progress callback: candidate trials done at each poll
    typed = client.wait(
        sid, on_progress=lambda st: progress.append(st.candidate_trials_done), interval_s=0.5, timeout_s=150
    )
    assert typed.search.state == "completed", typed.search.failure_reason
    assert progress == sorted(progress) and progress[-1] == 4 and len(progress) > 1
    final = typed.model_dump(mode="json")

    trials = [t.model_dump(mode="json") for t in client.trials(sid)]
    rounds = [r.model_dump(mode="json") for r in client.rounds(sid)]
    baselines = {t["baseline"]: t for t in trials if t["baseline"]}
    candidates = [t for t in trials if t["candidate_id"] is not None]
    assert sorted(baselines) == sorted(baseline_names())  # every member of both lossless families
    assert [r["index"] for r in rounds] == [1, 2]
    assert all(r["state"] == "completed" and r["simulator_kind"] == "analytical" for r in rounds)
    assert sorted(t["round_index"] for t in candidates) == [1, 1, 2, 2]
    # every trial ran exactly once, on its first claim, and has exactly its one measurement
    for t in trials:
        assert t["state"] == "succeeded", (t["id"], t["failure_reason"])
        assert t["attempt"] == 1
        assert len(t["iteration_times"]) == WORKER_FLAGS["iterations"]
        assert t["measurement"]["warmup"] == WORKER_FLAGS["warmup"]
    # no strategy was proposed twice in one search
    keys = {str(sorted(t["strategy"]["variables"], key=str)) for t in candidates}
    assert len(keys) == len(candidates)
    # the reported best and speed-ups are recomputable from the trials
    best = min(candidates, key=lambda t: (t["median_time"], t["id"]))
    assert final["best_trial_id"] == best["id"]
    assert final["best_time"] == pytest.approx(best["median_time"])
    for family in ("horovod", "ps"):  # tuned = the family's fastest measured member
        tuned = min(b["median_time"] for name, b in baselines.items() if family_of(name) == family)
        assert final["speedups"][family] == pytest.approx(tuned / best["median_time"])
    (report,) = final["reports"]
    assert report["space"] == "lossless" and report["winner"]["label"] == f"trial:{best['id']}"
    for r in report["ratios"]:
        assert r["low"] <= r["ratio"] <= r["high"]
    assert final["candidate_trials_done"] == 4
    # the pipeline reads the best strategy and uploads its own runtimes of it
    best_strategy = client.best_strategy(sid)
    assert best_strategy is not None
    assert best_strategy.model_dump(mode="json")["variables"] == best["strategy"]["variables"]
    uploaded = client.upload_runtime(
        model="tiny-mlp", cluster="two-node", strategy=best_strategy, iteration_times=[0.5, 0.52, 0.51]
    )
    assert uploaded.source == "user" and uploaded.median_time == pytest.approx(0.51)

    # At-least-once delivery: duplicated nudges for every trial change nothing.
    before = {t["id"]: (t["attempt"], t["iteration_times"]) for t in trials}
    for t in trials:
        for _ in range(3):
            assert stack.nudger.nudge(t["id"], t["cluster_name"])
    time.sleep(3.0)  # the worker consumes them (SQL transport polls every second)
    after = {t.id: (t.attempt, t.iteration_times) for t in client.trials(sid)}
    assert after == before
    with stack.sessions() as session:
        runtimes = repo.list_runtimes(session, domain="tiny-mlp__two-node")
        retrains = repo.list_retrain_requests(session, domain="tiny-mlp__two-node")
    # one runtime record per trial, and the pipeline's upload
    assert sorted(r.trial_id for r in runtimes if r.trial_id is not None) == sorted(before)
    assert [r.id for r in runtimes if r.trial_id is None] == [uploaded.id]
    assert [r.state for r in retrains] == ["done", "done"]  # one retraining after each round
