"""Crash recovery: kill -9 a worker in the middle of a trial; the stale sweep requeues the trial, a
second worker runs it, and it ends with exactly one measurement. The killed worker's trial process
dies with it (PR_SET_PDEATHSIG), so nothing of the first attempt can report later."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from service.db import repository as repo
from service.loop.stack import Stack, StackConfig, embedded_worker_argv, worker_env
from service.settings import Settings


@pytest.fixture
def stack(tmp_path: Path, zoo_dir: Path) -> Iterator[Stack]:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url="",
        broker_url="",
        heartbeat_timeout_s=3.0,
        sweep_interval_s=0.5,
    )
    with Stack(settings, StackConfig(embedded_worker=False, port=0, tick_s=0.3)) as s:
        yield s


def start_worker(stack: Stack, token: str, name: str, mark: str) -> subprocess.Popen[bytes]:
    flags = {
        "iterations": 3,
        "warmup": 1,
        "heartbeat": 0.5,
        "poll": 0.3,
        "clusters": "two-node",
        "name": name,
    }
    env = {**worker_env(token), "STRATEGIST_TEST_MARK": mark}
    return subprocess.Popen(embedded_worker_argv(api=stack.url, broker="", flags=flags), env=env)


def test_killed_worker_trial_is_requeued_and_measured_once(
    stack: Stack, wait_for: Callable[..., Any], marked: Callable[[str], dict[int, str]]
) -> None:
    with stack.sessions() as s:
        owner = repo.create_token(s, name="alice", role="user").info
        worker_token = repo.create_token(s, name="gpu-host", role="worker").secret
        model = repo.zoo_spec(s, kind="model", name="tiny-mlp")
        cluster = repo.zoo_spec(s, kind="cluster", name="two-node")
        search = repo.create_search(
            s, owner_id=owner.user_id, model=model, cluster=cluster, trial_budget=1,
            candidates_per_round=1, samples_per_round=20,
        )  # fmt: skip
    stack.loop.wake()

    def first_trial() -> Any:
        with stack.sessions() as s:
            trials = repo.list_trials(s, search_id=search.id)
        return trials[0] if trials else None

    mark1 = uuid.uuid4().hex
    w1 = start_worker(stack, worker_token, "w1", mark1)
    try:
        t = wait_for(lambda: (t := first_trial()) and t.state == "running" and t, 60, "w1 to claim a trial")
        assert t.claimed_by == "w1" and t.attempt == 1
        time.sleep(1.0)  # the trial is under way (its emulated cluster is starting)
        assert len(marked(mark1)) >= 2  # the worker and its trial process
        os.kill(w1.pid, signal.SIGKILL)
        w1.wait()
        # the trial process and everything it started die with the worker
        wait_for(lambda: not marked(mark1), 20, "the killed worker's processes to exit")
        requeued = wait_for(
            lambda: (x := first_trial()) and x.state == "queued" and x, 20, "the sweep to requeue the trial"
        )
        assert requeued.id == t.id and requeued.attempt == 1 and requeued.claimed_by is None
    finally:
        if w1.poll() is None:
            w1.kill()
            w1.wait()

    w2 = start_worker(stack, worker_token, "w2", uuid.uuid4().hex)
    try:
        done = wait_for(
            lambda: (x := first_trial()) and x.state in ("succeeded", "failed") and x,
            90,
            "w2 to finish the trial",
        )
    finally:
        w2.terminate()
        w2.wait(timeout=30)
    assert done.state == "succeeded", done.failure_reason
    assert done.attempt == 2 and done.claimed_by == "w2"
    with stack.engine.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM measurements WHERE trial_id = :t"), {"t": t.id}).scalar()
        attempts = conn.execute(
            text("SELECT attempt FROM measurements WHERE trial_id = :t"), {"t": t.id}
        ).all()
    assert n == 1 and [a[0] for a in attempts] == [2]
