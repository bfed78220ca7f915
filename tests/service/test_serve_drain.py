"""A normal stop drains (issue 44, item 5): SIGTERM or Ctrl-C of `strategist serve` or of a worker
mid-trial hands the running trial back (``POST /trials/{id}/release``: queued again at once, its
attempt not spent), ends the trial's processes (the trial process and the executor's ranks, which
run in sessions of their own) and removes their spec folders before the process exits.

`serve` and workers run as real subprocesses marked with ``STRATEGIST_TEST_MARK`` (the helpers of
``test_serve_processes``) and a private ``TMPDIR``, so the test sees exactly its own processes and
folders. The heartbeat timeout is long (600 s): a trial found queued again was released, not swept.
The chaos test (``-m slow``) adds 5 normal stops of serve mid-trial and kill -9s of the loop's jobs
(2 of baselines jobs, 2 of round jobs, told apart by their process names) over 3 searches, and prints lost / duplicated / attempts spent by stops / TMPDIR
leftovers (``pytest -s``); its kill -9 counterpart is ``test_serve_processes``'s chaos test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from service.db import repository as repo
from service.db.engine import make_engine, session_factory
from tests.service.test_serve_processes import TRIAL, Serve, workers

API = "/api/v1"
RANK = "runtime.executor.worker_main"


# -- the release endpoint ---------------------------------------------------------------------


def _claim(client: TestClient, w: dict[str, str]) -> dict[str, Any]:
    r = client.post(f"{API}/workers/claim", json={"clusters": ["two-node"], "worker": "w1"}, headers=w)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_release_requeues_at_once_without_spending_the_attempt(
    client: TestClient, tokens: dict[str, Any], queued: int
) -> None:
    w = tokens["worker"]
    for _ in range(5):  # more releases than max_trial_attempts: none is counted
        claim = _claim(client, w)
        assert claim["attempt"] == 1
        ident = {"attempt": 1, "claim_token": claim["claim_token"], "worker": "w1", "reason": "SIGTERM"}
        r = client.post(f"{API}/trials/{claim['trial']['id']}/release", json=ident, headers=w)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["released"] is True
        assert (body["trial"]["state"], body["trial"]["attempt"]) == ("queued", 0)
        # the old claim is dead: a second release, a heartbeat or a report of it changes nothing
        again = client.post(f"{API}/trials/{claim['trial']['id']}/release", json=ident, headers=w)
        assert again.json()["released"] is False
        quote = {"attempt": 1, "claim_token": claim["claim_token"]}
        beat = client.post(f"{API}/trials/{claim['trial']['id']}/heartbeat", json=quote, headers=w)
        assert beat.json()["accepted"] is False
    # a claim then a report after the releases: measured once, attempt 1
    claim = _claim(client, w)
    ident = {"attempt": claim["attempt"], "claim_token": claim["claim_token"]}
    r = client.post(
        f"{API}/trials/1/report", json=ident | {"measurement": {"iteration_times": [0.5, 0.5]}}, headers=w
    )
    assert r.json()["recorded"] is True and r.json()["trial"]["attempt"] == 1


def test_release_of_a_cancelled_search_cancels_the_trial(
    client: TestClient, tokens: dict[str, Any], queued: int
) -> None:
    w = tokens["worker"]
    claim = _claim(client, w)
    client.post(f"{API}/searches/{queued}/cancel", headers=tokens["alice"])
    ident = {"attempt": claim["attempt"], "claim_token": claim["claim_token"]}
    r = client.post(f"{API}/trials/1/release", json=ident, headers=w)
    assert r.json()["released"] is True and r.json()["trial"]["state"] == "cancelled"


def test_release_is_for_the_claim_holder_only(
    client: TestClient, tokens: dict[str, Any], queued: int
) -> None:
    w = tokens["worker"]
    claim = _claim(client, w)
    wrong = {"attempt": claim["attempt"], "claim_token": "0" * 32}
    assert client.post(f"{API}/trials/1/release", json=wrong, headers=w).json()["released"] is False
    # A user's token may run a worker for the user's own searches (trial routing, docs/service.md), so
    # it may call release; the claim token is what proves the claim, and without it nothing changes.
    assert (
        client.post(f"{API}/trials/1/release", json=wrong, headers=tokens["alice"]).json()["released"]
        is False
    )
    ident = {"attempt": claim["attempt"], "claim_token": claim["claim_token"]}
    assert client.post(f"{API}/trials/1/release", json=ident).status_code == 401
    assert client.post(f"{API}/trials/99/release", json=ident, headers=w).status_code == 404
    assert client.get(f"{API}/trials/1", headers=tokens["alice"]).json()["state"] == "running"


# -- serve and workers as processes ----------------------------------------------------------


def spec_dirs(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.glob("strategist-exec-*"))


class Running:
    """A serve on a fresh data folder with one search, and how to find its running trial."""

    def __init__(
        self, tmp_path: Path, mark: str, *, search: bool = True, env: dict[str, str] | None = None
    ) -> None:
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.env = {
            "TMPDIR": str(self.tmp),
            "STRATEGIST_HEARTBEAT_TIMEOUT_S": "600",  # a trial queued again was released, not swept
            "STRATEGIST_WORKER_ITERATIONS": "2000",  # a trial takes about a minute: the stop lands mid-trial
            **(env or {}),
        }
        self.data = tmp_path / "data"
        self.serve = Serve(self.data, mark, self.env)
        self.serve.start()
        engine = make_engine(f"sqlite:///{self.data / 'strategist.db'}")
        self.engine = engine
        self.sessions: sessionmaker[Session] = session_factory(engine)
        with self.sessions() as s:
            self.owner = repo.create_token(s, name="alice", role="user").info.user_id
            self.worker_secret = repo.create_token(s, name="w-ext", role="worker").secret
        self.searches: list[int] = []
        self.search = self.new_search() if search else 0

    def new_search(self, seed: int = 0, budget: int = 2, samples: int = 20) -> int:
        with self.sessions() as s:
            model = repo.zoo_spec(s, kind="model", name="tiny-mlp")
            cluster = repo.zoo_spec(s, kind="cluster", name="two-node")
            made = repo.create_search(
                s, owner_id=self.owner, model=model, cluster=cluster, trial_budget=budget,
                candidates_per_round=2, samples_per_round=samples, seed=seed,
            ).id  # fmt: skip
        self.searches.append(made)
        return made

    def running_trial(self, marked: Callable[[str], dict[int, str]], mark: str) -> Any:
        """The running trial, once its trial process has ranks (the trial is past its start-up)."""
        procs = marked(mark)
        if not any(RANK in c for c in procs.values()) or not any(TRIAL in c for c in procs.values()):
            return None
        with self.sessions() as s:
            running = [
                t for i in self.searches for t in repo.list_trials(s, search_id=i) if t.state == "running"
            ]
        return running[0] if running else None

    def trial(self, trial_id: int) -> Any:
        with self.sessions() as s:
            return repo.get_trial(s, trial_id=trial_id)


def test_sigterm_of_serve_mid_trial_hands_the_trial_back(
    tmp_path: Path,
    zoo_dir: Path,
    mark: str,
    marked: Callable[[str], dict[int, str]],
    wait_for: Callable[..., Any],
) -> None:
    run = Running(tmp_path, mark)
    try:
        trial = wait_for(lambda: run.running_trial(marked, mark), 180, "a running trial with its ranks")
        time.sleep(1.0)
        assert run.trial(trial.id).state == "running"  # mid-trial: 2000 iterations take about a minute
        assert spec_dirs(run.tmp)
        t0 = time.monotonic()
        assert run.serve.proc is not None
        run.serve.proc.send_signal(signal.SIGTERM)
        code = run.serve.proc.wait(timeout=90)
        took = time.monotonic() - t0
        after = run.trial(trial.id)
        # the loop's forkserver notices its parent is gone on its own; the trial's processes are
        # already gone (they were ended before serve exited)
        ranks = {p: c for p, c in marked(mark).items() if RANK in c or TRIAL in c}
        assert not ranks, ranks
        wait_for(lambda: not marked(mark), 10, f"serve's processes to exit: {marked(mark)}")
        print(f"serve SIGTERM: exit {code} after {took:.1f} s; trial {after.state} attempt {after.attempt}")
        assert (after.state, after.attempt) == ("queued", trial.attempt - 1), after
        assert took < 60
        assert spec_dirs(run.tmp) == []
    finally:
        run.serve.stop()
        run.engine.dispose()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_signal_of_a_worker_mid_trial_hands_the_trial_back(
    sig: int,
    tmp_path: Path,
    zoo_dir: Path,
    mark: str,
    marked: Callable[[str], dict[int, str]],
    wait_for: Callable[..., Any],
) -> None:
    """A worker on its own (`strategist worker`, polling the API): SIGTERM and Ctrl-C both drain."""
    run = Running(tmp_path, mark, search=False)
    embedded: list[int] = []
    try:
        # serve's embedded worker is frozen before the search exists, so the test's worker (a
        # separate `strategist worker`, polling) claims the trial and gets the signal
        embedded = wait_for(lambda: workers(marked(mark)), 120, "serve's embedded worker")
        for pid in embedded:
            os.kill(pid, signal.SIGSTOP)
        run.search = run.new_search()
        env = {
            **os.environ,
            **run.env,
            "STRATEGIST_TEST_MARK": mark,
            "STRATEGIST_WORKER_TOKEN": run.worker_secret,
        }
        w = subprocess.Popen(
            [sys.executable, "-m", "service.queue.worker_main", "--pool", "testbed", "--api", run.serve.url,
             "--clusters", "two-node", "--name", "drain-test", "--log-level", "warning"],
            env=env,
        )  # fmt: skip
        try:
            trial = wait_for(lambda: run.running_trial(marked, mark), 180, "a running trial with its ranks")
            assert trial.claimed_by == "drain-test"
            time.sleep(1.0)
            assert run.trial(trial.id).state == "running"
            t0 = time.monotonic()
            w.send_signal(sig)
            code = w.wait(timeout=90)
            took = time.monotonic() - t0
        finally:
            if w.poll() is None:
                w.kill()
                w.wait()
        after = run.trial(trial.id)
        # the test's worker, its trial process and its ranks (serve's own processes stay up)
        mine = {
            p: c
            for p, c in marked(mark).items()
            if p not in embedded and any(k in c for k in (RANK, TRIAL, "drain-test"))
        }
        print(f"worker {signal.Signals(sig).name}: exit {code} after {took:.1f} s; trial {after.state} "
              f"attempt {after.attempt}")  # fmt: skip
        assert (after.state, after.attempt) == ("queued", trial.attempt - 1), after
        assert code == (130 if sig == signal.SIGINT else 0)
        assert took < 60
        assert not mine, mine
        assert spec_dirs(run.tmp) == []
    finally:
        for pid in embedded:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        run.serve.stop()
        run.engine.dispose()


# -- chaos: normal stops of serve and kills of the loop's jobs ---------------------------------


def forkservers(procs: dict[int, str]) -> list[int]:
    """The loop's forkserver (its jobs' parent)."""
    return [p for p, c in procs.items() if "multiprocessing.forkserver" in c and "resource_tracker" not in c]


def children(pid: int) -> list[int]:
    """The children of ``pid`` (cheap: no walk of /proc)."""
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def job_name(pid: int) -> str:
    """A loop job's name (``service.loop.jobs.job_title``: ``s3 round 2``, ``s3 baselines``); '' if gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class JobKiller:
    """kill -9s of the loop's jobs, ``want`` of each kind (``baselines``, ``round``), each job at most
    once (a job killed again on its retry could spend its last attempt: that is the retry budget's
    test, not this one)."""

    def __init__(self, want: dict[str, int]) -> None:
        self.want = want
        self.kills: list[tuple[str, int]] = []  # (job name, pid)
        self.seen: set[str] = set()

    def kind(self, name: str) -> str:
        return name.split(" ", 1)[1].split(" ", 1)[0] if " " in name else ""

    def needed(self) -> bool:
        return any(self.count(k) < n for k, n in self.want.items())

    def count(self, kind: str) -> int:
        return sum(1 for name, _ in self.kills if self.kind(name) == kind)

    def poll(self, servers: list[int], seconds: float) -> None:
        """Watch the forkservers' children for ``seconds``; kill -9 each wanted job seen."""
        end = time.monotonic() + seconds
        while self.needed() and time.monotonic() < end:
            for pid in (j for f in servers for j in children(f)):
                name = job_name(pid)
                kind = self.kind(name)
                if name in self.seen or self.count(kind) >= self.want.get(kind, 0):
                    continue
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    self.kills.append((name, pid))
                    self.seen.add(name)
            time.sleep(0.005)


@pytest.mark.slow
def test_chaos_normal_stops_of_serve_and_kills_of_round_jobs(
    tmp_path: Path,
    zoo_dir: Path,
    mark: str,
    marked: Callable[[str], dict[int, str]],
    wait_for: Callable[..., Any],
) -> None:
    """Issue 44: 5 SIGTERMs of serve, each with a trial running (restarted each time), and kill -9s
    of the loop's jobs -- 2 of *baselines* jobs and 2 of *round* jobs, each found by its name
    (``s<search> round <n>``) -- over 3 searches: every search completes, no trial is lost or
    measured twice, no normal stop spends an attempt, and nothing of ours is left in TMPDIR
    (torch's own compile cache folder is not ours)."""
    env = {
        "STRATEGIST_HEARTBEAT_TIMEOUT_S": "30",  # a stop that did not release is swept (and counted)
        "STRATEGIST_WORKER_ITERATIONS": "600",
    }
    run = Running(tmp_path, mark, search=False, env=env)
    # many samples per round: a round's job runs long enough to be caught and killed; 3 rounds each
    searches = [run.new_search(seed, budget=6, samples=2000) for seed in range(3)]
    stops: list[
        tuple[int, int, str, int, float]
    ] = []  # (trial, attempt before, state after, attempt after, s)
    killer = JobKiller({"baselines": 2, "round": 2})
    serve = run.serve
    servers: list[int] = []
    deadline = time.monotonic() + 1500

    def finished() -> bool:
        with run.sessions() as s:
            return all(repo.get_search(s, search_id=i).state in ("completed", "failed") for i in searches)

    try:
        while not finished():
            assert time.monotonic() < deadline, f"searches not finished: stops {stops}, kills {killer.kills}"
            if killer.needed():  # a job is caught by polling its forkserver's children
                servers = servers or forkservers(marked(mark))
                killer.poll(servers, 1.0)
            # a stop ends the running jobs too; serve's next start runs them again (same names,
            # new processes), so the kills still find them
            trial = run.running_trial(marked, mark) if len(stops) < 5 else None
            if trial is None:
                time.sleep(0.05 if killer.needed() else 0.5)
                continue
            assert serve.proc is not None
            t0 = time.monotonic()
            serve.proc.send_signal(signal.SIGTERM)
            serve.proc.wait(timeout=90)
            took = time.monotonic() - t0
            after = run.trial(trial.id)
            stops.append((trial.id, trial.attempt, after.state, after.attempt, round(took, 1)))
            wait_for(lambda: not marked(mark), 30, f"serve's processes to exit: {marked(mark)}")
            serve = run.serve = Serve(run.data, mark, run.env)
            serve.start()
            servers = []
        with run.sessions() as s:
            finals = {i: repo.get_search(s, search_id=i) for i in searches}
            trials = [t for i in searches for t in repo.list_trials(s, search_id=i)]
        with run.engine.connect() as conn:
            from sqlalchemy import text

            per_trial: dict[int, int] = dict(
                conn.execute(text("SELECT trial_id, count(*) FROM measurements GROUP BY trial_id")).all()
            )
    finally:
        serve.stop()
        run.engine.dispose()
    wait_for(lambda: not marked(mark), 60, f"serve's processes to exit: {marked(mark)}")
    ended = [t for t in trials if t.state in ("succeeded", "failed")]
    lost = [t.id for t in trials if t.state not in ("succeeded", "failed", "cancelled")] + [
        t.id for t in ended if per_trial.get(t.id, 0) == 0
    ]
    duplicated = [i for i, n in per_trial.items() if n > 1]
    spent = sum(t.attempt - 1 for t in ended)
    leftovers = sorted(p.name for p in run.tmp.iterdir() if p.name.startswith("strategist"))
    kills = {k: killer.count(k) for k in killer.want}
    print(  # the figures of a run (pytest -s)
        f"chaos: {len(stops)} serve stops mid-trial {stops}; job kills {kills} "
        f"{[name for name, _ in killer.kills]}; searches {[f.state for f in finals.values()]}; trials "
        f"{len(trials)}; lost {len(lost)}; duplicated {len(duplicated)}; attempts spent by stops {spent}; "
        f"TMPDIR leftovers {leftovers}"
    )
    assert len(stops) == 5 and kills == {"baselines": 2, "round": 2}, (stops, killer.kills)
    assert all(state == "queued" and a == b - 1 for _, b, state, a, _ in stops), stops
    assert all(took < 60 for *_, took in stops), stops
    assert all(f.state == "completed" for f in finals.values()), {
        i: f.failure_reason for i, f in finals.items()
    }
    assert not lost and not duplicated
    assert spent == 0, [(t.id, t.attempt) for t in ended]
    assert leftovers == []
