"""Process hygiene of `strategist serve`: its embedded worker, the worker's trial process (with the
emulated cluster's namespaces and the executor's processes) and the loop's jobs all die with it,
also on kill -9; a restarted service runs exactly one embedded worker; the worker's lock file
makes a second worker wait for the first.

`serve` runs as a real subprocess (the console script) on a fresh data folder; every process it
starts inherits ``STRATEGIST_TEST_MARK``, so the test lists exactly its own processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.db import repository as repo
from service.db.engine import make_engine, session_factory
from service.queue.worker_main import hold_lock

pytestmark = pytest.mark.netns

WORKER = "service.queue.worker_main"
TRIAL = "runtime.worker_trial"


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def namespaces_of(pids: set[int]) -> set[str]:
    """The testbed namespaces owned by ``pids`` (named ``stb-<owner pid>-…``)."""
    return {ns for ns in namespaces() if ns.startswith("stb-") and ns.split("-")[1] in {str(p) for p in pids}}


class Serve:
    """`strategist serve` as a subprocess on ``data_dir``; ``start``, ``kill9``, ``stop``."""

    def __init__(self, data_dir: Path, mark: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.mark = mark
        self.extra = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout_s: float = 180.0) -> None:
        script = Path(sys.executable).parent / "strategist"
        argv = (
            [str(script)]
            if script.exists()
            else [sys.executable, "-c", "from service.cli import main; main()"]
        )
        out = self.data_dir.parent / f"serve-{uuid.uuid4().hex[:6]}.out"
        env = {
            **os.environ,
            "STRATEGIST_DATA_DIR": str(self.data_dir),
            "STRATEGIST_TEST_MARK": self.mark,
            "STRATEGIST_SWEEP_INTERVAL_S": "1",
            **self.extra,
        }
        with out.open("wb") as f:
            self.proc = subprocess.Popen(
                [*argv, "serve", "--port", "0"], env=env, stdout=f, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while "strategist serving at " not in (text := out.read_text(errors="replace")):
            assert self.proc.poll() is None, f"serve exited with {self.proc.returncode}: {text[-3000:]}"
            assert time.monotonic() < deadline, f"serve did not start: {text[-3000:]}"
            time.sleep(0.2)
        self.url = text.split("strategist serving at ", 1)[1].split()[0]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def mark(marked: Callable[[str], dict[int, str]]) -> Iterator[str]:
    """A fresh mark; whatever still carries it at the end is killed (and named in the failure)."""
    m = uuid.uuid4().hex
    yield m
    for pid in marked(m):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def workers(procs: dict[int, str]) -> list[int]:
    return [pid for pid, cmd in procs.items() if WORKER in cmd]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[1])


def test_kill_9_of_serve_leaves_no_worker_trial_process_or_namespace(
    tmp_path: Path,
    zoo_dir: Path,
    mark: str,
    marked: Callable[[str], dict[int, str]],
    wait_for: Callable[..., Any],
) -> None:
    serve = Serve(tmp_path / "data", mark)
    serve.start()
    try:
        engine = make_engine(f"sqlite:///{tmp_path / 'data' / 'strategist.db'}")
        sessions = session_factory(engine)
        with sessions() as s:
            owner = repo.create_token(s, name="alice", role="user").info
            model = repo.zoo_spec(s, kind="model", name="tiny-mlp")
            cluster = repo.zoo_spec(s, kind="cluster", name="two-node")
            repo.create_search(
                s, owner_id=owner.user_id, model=model, cluster=cluster, trial_budget=4,
                candidates_per_round=2, samples_per_round=20,
            )  # fmt: skip
        engine.dispose()

        def trial_with_testbed() -> Any:
            trials = {pid for pid, cmd in marked(mark).items() if TRIAL in cmd}
            return trials if trials and namespaces_of(trials) else None

        trial_pids = wait_for(trial_with_testbed, 180, "a trial process with its testbed")
        before = marked(mark)
        assert workers(before) and len(before) >= 4  # serve, worker, trial process, ranks (and jobs)
        serve.kill9()
    finally:
        serve.stop()

    wait_for(lambda: not marked(mark), 60, f"serve's processes to exit: {marked(mark)}")
    wait_for(lambda: not namespaces_of(trial_pids), 30, "the trial's namespaces to be deleted")


def test_restarted_serve_runs_one_embedded_worker(
    tmp_path: Path,
    zoo_dir: Path,
    mark: str,
    marked: Callable[[str], dict[int, str]],
    wait_for: Callable[..., Any],
) -> None:
    data = tmp_path / "data"
    for restart in range(4):
        serve = Serve(data, mark)
        serve.start()
        try:
            worker = wait_for(
                lambda: [w for w in workers(marked(mark)) if parent_of(w) == serve.pid],  # noqa: B023
                120,
                f"the embedded worker of serve #{restart}",
            )
            time.sleep(2.0)  # a leftover worker would still be there
            assert workers(marked(mark)) == worker, marked(mark)
            lock = data / "embedded-worker.lock"
            wait_for(lambda: lock.is_file() and lock.read_text() == str(worker[0]), 60, "the worker's lock")  # noqa: B023
            if restart < 3:
                serve.kill9()
        finally:
            if restart == 3:
                serve.stop()
    wait_for(lambda: not marked(mark), 60, f"serve's processes to exit: {marked(mark)}")


def test_a_second_worker_waits_for_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "worker.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from service.queue.worker_main import hold_lock; import time; "
         f"hold_lock(__import__('pathlib').Path({str(lock)!r})); print('held', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    got: list[int] = []
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        assert lock.read_text() == str(holder.pid)
        waiter = threading.Thread(target=lambda: got.append(hold_lock(lock)), daemon=True)
        waiter.start()
        waiter.join(1.5)
        assert waiter.is_alive() and not got  # waiting while the first holds it
        os.kill(holder.pid, signal.SIGKILL)  # the kernel drops the lock of a dead process
        holder.wait()
        waiter.join(10)
        assert got and lock.read_text() == str(os.getpid())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for fd in got:
            os.close(fd)
