"""Worker liveness you can see (issue 21): workers heartbeat per pool; the API lists them live or not
with their current trial; a search whose trials wait with no live worker says so in
``state_detail``; a worker whose token is revoked stops with a clear log line and exit status 3.

The first test runs real processes (the API and loop of `strategist serve`, two poll-only workers):
one is killed with SIGKILL, the other's token is revoked through ``POST /tokens/{id}/revoke``. The second
checks the stall rule's arithmetic on both databases with a chosen clock.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.loop.stack import Stack, StackConfig, embedded_worker_argv, worker_env
from service.queue.worker_main import EXIT_TOKEN_REFUSED
from service.settings import Settings
from simulator.spec import ClusterSpec, ModelSpec

LIVE_S = 3.0  # the stack's heartbeat_timeout_s: the liveness window and the stall threshold
API = "/api/v1"


@pytest.fixture
def stack(tmp_path: Path, zoo_dir: Path) -> Iterator[Stack]:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url="",
        broker_url="",
        heartbeat_timeout_s=LIVE_S,
        sweep_interval_s=0.5,
    )
    with Stack(settings, StackConfig(embedded_worker=False, port=0, tick_s=0.3)) as s:
        yield s


def _worker(stack: Stack, token: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    flags = {"poll": 0.3, "clusters": "two-node", "name": name}
    with log.open("wb") as out:
        return subprocess.Popen(
            embedded_worker_argv(api=stack.url, broker="", flags=flags),
            env=worker_env(token),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_killed_and_revoked_workers_are_seen_dead_and_the_search_says_so(
    stack: Stack, tmp_path: Path, wait_for: Callable[..., Any]
) -> None:
    with stack.sessions() as s:
        admin = repo.create_token(s, name="root", role="admin").secret
        user = repo.create_token(s, name="alice", role="user")
        w1_token = repo.create_token(s, name="host-1", role="worker").secret
        w2 = repo.create_token(s, name="host-2", role="worker")
    http = httpx.Client(base_url=stack.url + API, timeout=60)  # a busy CI host can be slow
    as_user = {"Authorization": f"Bearer {user.secret}"}

    def workers(**params: Any) -> dict[str, Any]:
        r = http.get("/workers", params=params, headers=as_user)
        assert r.status_code == 200, r.text
        return {w["name"]: w for w in r.json()["data"]}

    w1 = _worker(stack, w1_token, "w1", tmp_path / "w1.log")
    w2_proc = _worker(stack, w2.secret, "w2", tmp_path / "w2.log")
    try:
        live = wait_for(lambda: len(w := workers(live=True)) == 2 and w, 60, "both workers to register")
        for name in ("w1", "w2"):
            assert live[name]["pool"] == "testbed" and live[name]["clusters"] == ["two-node"]
            assert live[name]["live"] is True and live[name]["current_trial_id"] is None

        os.kill(w1.pid, signal.SIGKILL)
        w1.wait()
        revoke = http.post(f"/tokens/{w2.info.id}/revoke", headers={"Authorization": f"Bearer {admin}"})
        assert revoke.status_code == 200, revoke.text
        # The revoked worker stops by itself, saying why, with its own exit status.
        assert w2_proc.wait(timeout=30) == EXIT_TOKEN_REFUSED
        log = (tmp_path / "w2.log").read_text()
        assert "the API refused its token" in log and "invalid or revoked token" in log, log

        # Neither is live once the liveness window has passed (its arithmetic: the test below).
        gone = wait_for(lambda: not workers(live=True) and workers(), 60, "the workers to be seen dead")
        assert not gone["w1"]["live"] and not gone["w2"]["live"]

        # A search on their cluster: its trials wait, and after the threshold the search says why.
        with stack.sessions() as s:
            search = repo.create_search(
                s, owner_id=user.info.user_id, model=repo.zoo_spec(s, kind="model", name="tiny-mlp"),
                cluster=repo.zoo_spec(s, kind="cluster", name="two-node"), trial_budget=1,
                candidates_per_round=1, samples_per_round=20,
            )  # fmt: skip
        stack.loop.wake()

        def status() -> dict[str, Any]:
            r = http.get(f"/searches/{search.id}", headers=as_user)
            assert r.status_code == 200, r.text
            return dict(r.json())

        wait_for(lambda: status()["trials_by_state"]["queued"] > 0, 60, "the search's trials to be queued")
        detail = wait_for(lambda: status()["state_detail"], 60, "the search to report the stall")
        seen_at = datetime.now(UTC)
        with stack.sessions() as s:
            created = min(t.created_at for t in repo.list_trials(s, search_id=search.id))
        # Reported once the trials had waited the threshold, not before (the upper bound only
        # allows for this host's polling delays).
        assert LIVE_S <= (seen_at - created).total_seconds() <= LIVE_S + 30
        assert "queued on cluster two-node" in detail and "with no live worker for it" in detail
        assert "(pool testbed)" in detail, detail
    finally:
        for p in (w1, w2_proc):
            if p.poll() is None:
                p.kill()
                p.wait()
        http.close()


def _search_with_trial(session: Session, specs: Any) -> tuple[int, int]:
    owner = repo.create_token(session, name="alice", role="user").info.user_id
    model = repo.store_spec(session, spec=ModelSpec.model_validate(specs.model()), owner_id=owner)
    cluster = repo.store_spec(session, spec=ClusterSpec.model_validate(specs.cluster()), owner_id=owner)
    search = repo.create_search(
        session, owner_id=owner, model=model, cluster=cluster, trial_budget=2, candidates_per_round=1,
        samples_per_round=10,
    )  # fmt: skip
    repo.enqueue_trial(session, search_id=search.id, strategy=specs.strategy("h"), baseline="horovod")
    return search.id, owner


def test_stall_rule_counts_from_the_last_worker_seen(session: Session, specs: Any) -> None:
    search_id, _ = _search_with_trial(session, specs)
    # The clock is read from the stored rows, so the arithmetic is exact however slow the host.
    now = repo.list_trials(session, search_id=search_id)[0].created_at
    # No worker ever: a stall once the oldest queued trial has waited LIVE_S.
    assert repo.waiting_on_workers(session, search_id=search_id, live_s=LIVE_S, now=now) is None
    later = now + timedelta(seconds=LIVE_S + 1)
    line = repo.waiting_on_workers(session, search_id=search_id, live_s=LIVE_S, now=later)
    assert line is not None and line.startswith("1 trial(s) queued on cluster two-node for 4 s")
    assert line.endswith("(no worker has ever advertised it)")

    # A worker for another cluster changes nothing; one for this cluster makes the wait normal.
    repo.touch_worker(session, name="other", user_id=None, clusters=["elsewhere"], pool="gpu")
    assert repo.waiting_on_workers(session, search_id=search_id, live_s=LIVE_S, now=later) is not None
    repo.touch_worker(session, name="w", user_id=None, clusters=["two-node"], pool="testbed")
    seen = next(w.last_seen_at for w in repo.list_workers(session, live_s=LIVE_S) if w.name == "w")
    assert repo.waiting_on_workers(session, search_id=search_id, live_s=LIVE_S, now=seen) is None
    # ... until it has been silent LIVE_S: the wait counts from when it was last seen.
    line = repo.waiting_on_workers(
        session, search_id=search_id, live_s=LIVE_S, now=seen + timedelta(seconds=LIVE_S + 2)
    )
    assert line is not None and "for 5 s with no live worker" in line and "worker w (pool testbed)" in line
    listed = {w.name: w for w in repo.list_workers(session, live_s=LIVE_S, now=seen)}
    assert listed["w"].live and listed["w"].pool == "testbed" and listed["other"].pool == "gpu"
    live = repo.list_workers(session, live_s=60, live_only=True, now=seen)  # most recently seen first
    assert [w.name for w in live] == ["w", "other"]
    assert not repo.list_workers(session, live_s=60, live_only=True, now=seen + timedelta(seconds=61))

    # A claimed trial is the worker's current trial; its heartbeat keeps the worker live; a
    # silent one is marked as held by a gone worker.
    claim = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert claim is not None
    listed = {w.name: w for w in repo.list_workers(session, live_s=LIVE_S)}
    assert listed["w"].current_trial_id == claim.trial.id and listed["other"].current_trial_id is None
    ack = repo.heartbeat(
        session, trial_id=claim.trial.id, attempt=claim.attempt, claim_token=claim.claim_token
    )
    assert ack.accepted
    beat = repo.get_trial(session, trial_id=claim.trial.id).heartbeat_at
    assert beat is not None
    assert repo.waiting_on_workers(session, search_id=search_id, live_s=LIVE_S, now=beat) is None
    line = repo.waiting_on_workers(
        session, search_id=search_id, live_s=LIVE_S, now=beat + timedelta(seconds=LIVE_S + 3)
    )
    assert line == (
        f"trial {claim.trial.id} is held by worker w, silent for 6 s: its worker is gone; the sweep requeues it"
    )
    stale = repo.list_workers(session, live_s=LIVE_S, now=beat + timedelta(seconds=LIVE_S + 3))
    assert not any(w.live for w in stale)
