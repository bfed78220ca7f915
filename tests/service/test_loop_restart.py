"""A service restart in the middle of a search: the loop holds no state of its own, so a new service
on the same database and broker continues the search where it was, and it finishes with every
trial measured once and no round planned twice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text

from search.baselines import baseline_names
from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.settings import Settings

WORKER_FLAGS = {"iterations": 3, "warmup": 1, "heartbeat": 0.5, "poll": 0.5, "clusters": "two-node"}


def test_search_survives_a_service_restart(
    tmp_path: Path, zoo_dir: Path, wait_for: Callable[..., Any]
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url="",
        broker_url="",
        heartbeat_timeout_s=5.0,
        sweep_interval_s=0.5,
    )
    config = StackConfig(worker_flags=WORKER_FLAGS, port=0, tick_s=0.3)

    first = Stack(settings, config)
    first.start()
    try:
        with first.sessions() as s:
            owner = repo.create_token(s, name="alice", role="user").info
            model = repo.zoo_spec(s, kind="model", name="tiny-mlp")
            cluster = repo.zoo_spec(s, kind="cluster", name="two-node")
            search = repo.create_search(
                s, owner_id=owner.user_id, model=model, cluster=cluster, trial_budget=4,
                candidates_per_round=2, samples_per_round=40, seed=1,
            )  # fmt: skip
        first.loop.wake()

        def progressed() -> bool:
            with first.sessions() as s:
                st = repo.search_status(s, search_id=search.id)
            return st.search.current_round >= 1 and st.trials_by_state["succeeded"] >= 1

        wait_for(progressed, 120, "round 1 to be planned and a trial measured")
    finally:
        first.stop()  # mid-search: the worker, the loop and the API go away

    with first.sessions() as s:
        mid = repo.search_status(s, search_id=search.id)
    assert mid.search.state == "running" and mid.candidate_trials_done < 4

    with Stack(settings, config) as second:

        def finished() -> Any:
            with second.sessions() as s:
                got = repo.get_search(s, search_id=search.id)
            return got.state in ("completed", "failed") and got

        final = wait_for(finished, 150, "the search to finish after the restart")
        assert final.state == "completed", final.failure_reason
        with second.sessions() as s:
            rounds = repo.list_rounds(s, search_id=search.id)
            trials = repo.list_trials(s, search_id=search.id)
        with second.engine.connect() as conn:
            per_trial = dict(
                conn.execute(text("SELECT trial_id, count(*) FROM measurements GROUP BY trial_id")).all()
            )
    assert [r.index for r in rounds] == [1, 2]
    assert all(r.state == "completed" for r in rounds)
    assert sorted(t.baseline or "" for t in trials) == ["", "", "", "", *sorted(baseline_names())]
    assert all(t.state == "succeeded" for t in trials), [(t.id, t.state, t.failure_reason) for t in trials]
    assert per_trial == {t.id: 1 for t in trials}
