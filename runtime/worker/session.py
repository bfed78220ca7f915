"""The worker's handle on its trial process (``runtime.worker.trial``), kept up across a domain's trials.

Contract: one trial at a time (the worker's lock guarantees it); ``run`` never raises for a trial
that fails, it returns a failed Measurement; ``kill`` may be called from another thread (the
heartbeat thread, on cancel) and makes a ``run`` in progress return a failure at once. The child
runs in its own process group and dies with the worker (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.measurement import Measurement

_PR_SET_PDEATHSIG = 1


def _pdeathsig(sig: int) -> None:
    """Ask the kernel for ``sig`` when this process's parent (the thread that started it) exits."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


def term_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the worker dies (Linux prctl).

    SIGTERM, not SIGKILL: the trial process's testbed turns SIGTERM into its teardown, so a worker
    that dies (or shuts down without closing its session) leaves no namespaces behind.
    """
    _pdeathsig(signal.SIGTERM)


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Get ``sig`` when the parent ``parent_pid`` exits; get it now if that already happened.

    For a process started by another that must not outlive it (``strategist serve``'s embedded
    worker). Called early in the child itself, so the parent needs no ``preexec_fn`` (unsafe in a
    process with threads); the parent check closes the window before the call. The kernel sends
    the signal when the *thread* that started the child exits, so the parent must start it from a
    thread that lives as long as it does (serve: its main thread).
    """
    _pdeathsig(sig)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc), children first.

    The executor's rank processes run in sessions of their own (``start_new_session``), so killing
    the trial process's group does not reach them: they are found by parentage instead, before
    the trial process dies and they are reparented.
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[-1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def end_processes(pids: list[int], grace_s: float = 15.0) -> list[int]:
    """SIGTERM ``pids``, then SIGKILL those still alive after ``grace_s``; returns the SIGKILLed."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    killed = [p for p in pids if _alive(p)]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return killed


#: Prefix of the executor's spec folders (``runtime.executor.session``): ``strategist-exec-<pid>-*``,
#: where pid is the trial process that made it, so leftovers are attributable.
SPEC_DIR_PREFIX = "strategist-exec-"


def remove_spec_dirs(pid: int) -> int:
    """Delete the spec folders the (dead) process ``pid`` left in the temp folder; how many."""
    import shutil
    import tempfile

    root = tempfile.gettempdir()
    n = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            if name.startswith(f"{SPEC_DIR_PREFIX}{pid}-"):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                n += 1
    return n


def session_key(model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]) -> str:
    """Trials with the same key can share one trial process (same model, cluster and options)."""
    h = hashlib.sha256()
    for part in (model.model_dump_json(), cluster.model_dump_json(), json.dumps(options, sort_keys=True)):
        h.update(part.encode())
    return h.hexdigest()


class TrialProcess:
    """A running ``python -m runtime.worker.trial`` for one (model, cluster, options)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]) -> None:
        self.key = session_key(model, cluster, options)
        self.last_used = time.monotonic()
        self._killed = threading.Event()
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.child = subprocess.Popen(
            [sys.executable, "-m", "runtime.worker.trial"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # its own process group: a cancel stops everything it started
            preexec_fn=term_with_parent,
        )
        head = {
            "model": model.model_dump(mode="json"),
            "cluster": cluster.model_dump(mode="json"),
            "options": options,
        }
        self._send(head)
        threading.Thread(target=self._read, name="trial-stdout", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self.child.poll() is None and not self._killed.is_set()

    def _send(self, obj: dict[str, Any]) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write((json.dumps(obj) + "\n").encode())
        self.child.stdin.flush()

    def _read(self) -> None:
        assert self.child.stdout is not None
        for raw in self.child.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith("{"):
                self._lines.put(line)
        self._lines.put(None)  # end of output: the process exited

    def run(
        self, trial_id: int, strategy: Strategy | dict[str, Any], timeout_s: float, attempt: int = 0
    ) -> Measurement:
        """Run one trial (a Strategy or another kind's plan document); a timeout, a kill or a dead
        process is a failed Measurement."""
        self.last_used = time.monotonic()
        doc = strategy.model_dump(mode="json") if isinstance(strategy, Strategy) else strategy
        try:
            self._send({"trial_id": trial_id, "attempt": attempt, "strategy": doc})
        except (BrokenPipeError, ValueError):
            return Measurement(failure=f"trial process exited with code {self.child.poll()}")
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            self.kill()
            return Measurement(failure=f"trial timed out after {timeout_s:.0f} s")
        finally:
            self.last_used = time.monotonic()
        if line is None:
            code = self.child.wait()
            self._remove_leftovers()
            reason = "stopped" if self._killed.is_set() else f"trial process exited with code {code}"
            return Measurement(failure=reason)
        try:
            return Measurement.model_validate_json(line)
        except ValueError as e:
            return Measurement(failure=f"trial process printed no valid measurement: {e}")

    def kill(self, grace_s: float = 5.0) -> None:
        """Stop the process, its group and every descendant (the executor's ranks run in sessions
        of their own): SIGTERM (the testbed tears down), then SIGKILL after ``grace_s``."""
        self._killed.set()
        ranks = descendants(self.child.pid) if self.child.poll() is None else []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child.pid, signal.SIGTERM)
        try:
            self.child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, signal.SIGKILL)
            self.child.wait()
        end_processes(ranks, grace_s)
        self._remove_leftovers()

    def close(self, timeout_s: float = 30.0) -> None:
        """End of input: the child tears its session and testbed down and exits."""
        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            assert self.child.stdin is not None
            self.child.stdin.close()
        try:
            self.child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """After the child exited: delete what a child that could not tear down left behind.

        A trial process killed outright (SIGKILL, the OOM killer) leaves its testbed's namespaces
        and the executor's processes inside them; ``cleanup_stale`` removes exactly those of dead
        owners (never a live testbed's). Harmless where no testbed was built or namespaces are
        not available.
        """
        if self.child.returncode is None:
            return
        remove_spec_dirs(self.child.pid)
        with contextlib.suppress(Exception):
            from runtime.testbed import cleanup_stale

            cleanup_stale()
