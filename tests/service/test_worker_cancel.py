"""Cancelling a search stops its running trial: the heartbeat answers "stop", the worker kills the
trial's processes and reports it stopped, so the trial ends 'cancelled' without waiting for the
stale sweep; the queued trials are dropped; the worker lives on for other work."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.settings import Settings

# Many iterations: the first trial is still running when the search is cancelled.
WORKER_FLAGS = {"iterations": 400, "warmup": 1, "heartbeat": 0.5, "poll": 0.5, "clusters": "two-node"}


@pytest.fixture
def stack(tmp_path: Path, zoo_dir: Path) -> Iterator[Stack]:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url="",
        broker_url="",
        heartbeat_timeout_s=120.0,  # long: the trial must end by the worker's report, not the sweep
        sweep_interval_s=1.0,
    )
    with Stack(settings, StackConfig(worker_flags=WORKER_FLAGS, port=0, tick_s=0.3)) as s:
        yield s


def test_cancel_stops_the_running_trial(stack: Stack, wait_for: Callable[..., Any]) -> None:
    with stack.sessions() as s:
        owner = repo.create_token(s, name="alice", role="user").info
        model = repo.zoo_spec(s, kind="model", name="tiny-mlp")
        cluster = repo.zoo_spec(s, kind="cluster", name="two-node")
        search = repo.create_search(
            s, owner_id=owner.user_id, model=model, cluster=cluster, trial_budget=2,
            candidates_per_round=2, samples_per_round=20,
        )  # fmt: skip
    stack.loop.wake()

    def trials() -> list[Any]:
        with stack.sessions() as s:
            return repo.list_trials(s, search_id=search.id)

    running = wait_for(lambda: [t for t in trials() if t.state == "running"], 180, "a running trial")[0]
    # let it get into its measured iterations (the heartbeats say it is alive)
    wait_for(lambda: [t for t in trials() if t.id == running.id and t.heartbeat_at != running.heartbeat_at], 60,
             "a heartbeat")  # fmt: skip
    with stack.sessions() as s:
        repo.cancel_search(s, search_id=search.id)
    started = time.monotonic()
    stopped = wait_for(
        lambda: [t for t in trials() if t.id == running.id and t.state != "running"], 60, "the trial to stop"
    )[0]
    assert stopped.state == "cancelled"
    assert time.monotonic() - started < 60 < 120  # by the worker's report, well before the stale timeout
    assert stopped.iteration_times == ()
    assert stopped.measurement is not None and "cancelled" in stopped.measurement["failure"]
    assert {t.state for t in trials()} == {"cancelled"}
    assert stack.worker is not None and stack.worker.poll() is None  # the worker lives on
