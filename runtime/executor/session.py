"""ExecutorSession: start a trial's processes once, run many strategies on them, never leak them.

Contract: ``run(strategy)`` always returns a :class:`Measurement`, never raises for a bad or
failing trial: an invalid or unsupported strategy, a memory estimate over the device, a crash, a
timeout or a session that cannot start is a Measurement with ``failure`` set. After a crash or a
timeout every process is killed (its whole process group) and the next ``run`` starts a fresh
set. ``close()`` (or leaving the ``with`` block) ends every process. Not thread-safe: one trial
at a time per session.
"""

from __future__ import annotations

import json
import os
import platform
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import torch

from runtime.executor import hostload
from runtime.executor.config import ExecutorConfig
from runtime.executor.layout import RankLayout
from runtime.executor.plan import unsupported_reason
from runtime.executor.results import aggregate, failed
from runtime.executor.worker_main import READY, RESULT, write_profiles
from runtime.launch import Launcher
from simulator.memory import GB, stage_memory, usable_bytes
from simulator.profile.store import model_profiles
from simulator.spec import ClusterSpec, ModelSpec, SpecError, Strategy
from simulator.spec.measurement import Measurement
from simulator.spec.profile import Profile

REPO_ROOT = Path(__file__).resolve().parents[2]
_WARNING = re.compile(r"^\[W\d{4} ")


class SessionFailure(RuntimeError):
    """The session's processes could not start or died; the message is the trial's failure reason."""


@dataclass
class TrialResult:
    """A measurement plus what tests look at: every worker's loss per iteration (real mode)."""

    measurement: Measurement
    losses: dict[int, list[float]] = field(default_factory=dict)
    wall_s: float = 0.0
    trial: int = -1


@dataclass
class _Proc:
    rank: int
    popen: subprocess.Popen[bytes]
    stderr_path: Path
    died_at: float | None = None


def memory_failure(model: ModelSpec, cluster: ClusterSpec, batch: int) -> str | None:
    """An estimated out-of-memory reason: a worker's device cannot hold a replica's parameters,
    gradients and ``batch`` samples of activations (``simulator.memory``'s rule). Decision: no
    optimizer state and the whole memory usable, so only trials that certainly cannot fit are
    refused; the planner's feasibility check is the stricter one."""
    need = stage_memory(model, 0, len(model.layers), stashed_samples=batch, state_factor=0.0)
    for n in cluster.worker_nodes:
        dev = cluster.device_type(n)
        if need.total > usable_bytes(dev):
            return (
                f"out of memory (estimated): params+grads {(need.params + need.grads) / GB:.2f} GB + activations "
                f"{need.activations / GB:.2f} GB > {dev.memory_gb:g} GB of {dev.name}"
            )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class ExecutorSession:
    """The processes of one (model, cluster, config) on one launcher, reused across strategies."""

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        launcher: Launcher,
        config: ExecutorConfig | None = None,
        profiles: tuple[Profile, ...] | None = None,
    ) -> None:
        """``profiles``: measured profiles the replay uses for their key (``layer_seconds``); None
        takes this model's from the profile store the cost model's CLI reads (``ProfileStore``:
        $STRATEGIST_PROFILES or datasets/profiles; a bad file raises SpecError naming its line)."""
        self.model = model
        if profiles is None:
            profiles = model_profiles(model.name)
        self.profiles = profiles
        self.cluster = cluster
        self.launcher = launcher
        self.config = config or ExecutorConfig()
        self.layout = RankLayout(cluster)
        self._procs: list[_Proc] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._dir: Path | None = None
        self._trials = 0
        self.starts = 0
        self.startup_s = 0.0

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.popen.poll() is None for p in self._procs)

    def start(self) -> None:
        """Start every process and wait until they joined the process group (SessionFailure if not)."""
        self._kill()
        t0 = time.monotonic()
        self._dir = Path(tempfile.mkdtemp(prefix=f"strategist-exec-{os.getpid()}-"))
        (self._dir / "model.json").write_text(self.model.model_dump_json())
        (self._dir / "cluster.json").write_text(self.cluster.model_dump_json())
        (self._dir / "config.json").write_text(self.config.to_json())
        write_profiles(self._dir, self.profiles)
        port = _free_port()
        env = {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        coord = self.layout.coordinator
        self._lines = queue.Queue()
        for rank in range(self.layout.world):
            node = self.layout.node_of(rank)
            argv = [sys.executable, "-m", "runtime.executor.worker_main", "--spec-dir", str(self._dir),
                    "--rank", str(rank), "--master", self.launcher.master_addr,
                    "--port", str(port), "--cuda-index", str(self._cuda_index(rank))]  # fmt: skip
            err = self._dir / f"rank{rank}.stderr"
            with err.open("wb") as ef:
                popen = self.launcher.spawn(
                    node,
                    argv,
                    env,
                    stdin=subprocess.PIPE if rank == coord else subprocess.DEVNULL,
                    stdout=subprocess.PIPE if rank == coord else subprocess.DEVNULL,
                    stderr=ef,
                    start_new_session=True,
                    cwd=str(REPO_ROOT),
                )
            self._procs.append(_Proc(rank, popen, err))
            if rank == coord:
                assert popen.stdout is not None
                threading.Thread(target=self._read, args=(popen.stdout,), daemon=True).start()
        self.starts += 1
        self._await(READY, self.config.startup_timeout_s, "start-up")
        self.startup_s = time.monotonic() - t0

    def _cuda_index(self, rank: int) -> int:
        """The worker's GPU: its index on its node, or, when every node shares one host (the
        launcher says ``single_host``), its worker rank (NCCL refuses two ranks on one GPU)."""
        if not self.layout.is_worker(rank):
            return -1
        return rank if getattr(self.launcher, "single_host", False) else self.layout.local_index(rank)

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self._lines.put(raw.decode(errors="replace").rstrip("\n"))
        self._lines.put(None)

    def _await(self, prefix: str, timeout: float, what: str) -> str:
        """The coordinator's next line starting with ``prefix``; SessionFailure on death or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            reason = self._dead_reason()
            if reason:
                self._kill()
                raise SessionFailure(reason)
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                raise SessionFailure(f"timeout: {what} took longer than {timeout:g} s")
            try:
                line = self._lines.get(timeout=min(0.05, left))
            except queue.Empty:
                continue
            if line is not None and line.startswith(prefix):
                return line[len(prefix) :]

    def _dead_reason(self) -> str | None:
        now = time.monotonic()
        for p in self._procs:
            if p.died_at is None and p.popen.poll() is not None:
                p.died_at = now
        dead = [p for p in self._procs if p.died_at is not None]
        if not dead:
            return None
        time.sleep(0.2)  # let the first one's traceback reach its file
        tails = {p.rank: _tail(p.stderr_path) for p in dead}
        # The root cause is a rank that did not die of a lost peer: ranks that only saw their
        # peer's connection reset are consequences, even when they are noticed first.
        first = min(dead, key=lambda p: (_peer_loss(tails[p.rank]), p.died_at, p.rank))
        code = first.popen.returncode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return f"rank {first.rank} {how}: {tails[first.rank]}"

    def _kill(self) -> None:
        for p in self._procs:
            if p.popen.poll() is None:
                try:
                    if os.getpgid(p.popen.pid) == p.popen.pid:
                        os.killpg(p.popen.pid, signal.SIGKILL)
                    else:
                        p.popen.kill()
                except ProcessLookupError:
                    pass
        for p in self._procs:
            try:
                p.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.popen.kill()
            for stream in (p.popen.stdin, p.popen.stdout):
                if stream is not None:
                    stream.close()
        self._procs = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def close(self) -> None:
        """Ask the processes to exit, then kill whatever is left."""
        coord = next((p for p in self._procs if p.rank == self.layout.coordinator), None)
        if coord is not None and self.alive and coord.popen.stdin is not None:
            try:
                coord.popen.stdin.write(b'{"cmd": "close"}\n')
                coord.popen.stdin.close()
                deadline = time.monotonic() + 10
                for p in self._procs:
                    p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> ExecutorSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- trials ------------------------------------------------------------------------------
    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "host": platform.node(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "launcher": type(self.launcher).__name__,
            "workers": self.layout.num_workers,
            "servers": self.layout.num_nodes,
            "session_starts": self.starts,
            # How crowded the host is: this session's processes per core and the 1-minute load.
            "processes_per_core": self.layout.world / (os.cpu_count() or 1),
            "host_load_1m": os.getloadavg()[0],
        }
        env.update(getattr(self.launcher, "environment", None) or {})
        return env

    def run(self, strategy: Strategy) -> Measurement:
        return self.run_detailed(strategy).measurement

    def run_detailed(self, strategy: Strategy) -> TrialResult:
        """Run one strategy; the result's measurement says why it failed, if it did."""
        t0 = time.monotonic()
        trial = self._trials
        self._trials += 1
        cfg = self.config
        if strategy.plan is not None:  # pipeline plans run on their own processes (issue 17)
            from runtime.pipeline.trial import run_plan_trial

            m = run_plan_trial(self.model, self.cluster, strategy, self.launcher, cfg)
            return TrialResult(m, wall_s=time.monotonic() - t0, trial=trial)
        reason = self._precheck(strategy)
        if reason is None:
            try:
                if not self.alive:
                    self.start()
                return self._execute(strategy, trial, t0)
            except SessionFailure as e:
                reason = str(e)
            except Exception as e:  # a bug here must still not lose the trial or leak processes
                self._kill()
                reason = f"executor error: {type(e).__name__}: {e}"
        env = self.environment()
        env["trial_wall_s"] = time.monotonic() - t0
        return TrialResult(failed(reason, cfg, env), wall_s=time.monotonic() - t0, trial=trial)

    def _precheck(self, strategy: Strategy) -> str | None:
        try:
            strategy.check(self.model, self.cluster)
        except SpecError as e:
            return f"invalid strategy: {e}"
        reason = unsupported_reason(strategy)
        if reason:
            return f"unsupported: {reason}"
        if self.config.compute == "replay" and self.config.check_memory:
            return memory_failure(self.model, self.cluster, self.config.batch_size or self.model.batch_size)
        return None

    def _execute(self, strategy: Strategy, trial: int, t0: float) -> TrialResult:
        load_before = os.getloadavg()[0]
        cpu_before = hostload.snapshot(p.popen.pid for p in self._procs)
        coord = next(p for p in self._procs if p.rank == self.layout.coordinator)
        cmd = {"cmd": "trial", "trial": trial, "strategy": json.loads(strategy.model_dump_json())}
        assert coord.popen.stdin is not None
        try:
            coord.popen.stdin.write((json.dumps(cmd) + "\n").encode())
            coord.popen.stdin.flush()
        except OSError as e:
            self._kill()
            raise SessionFailure(f"could not send the strategy to the coordinator: {e}") from e
        payload = json.loads(self._await(RESULT, self.config.timeout_s, "the trial"))
        cpu_after = hostload.snapshot(p.popen.pid for p in self._procs)
        env = self.environment()
        share = hostload.foreign_cpu_share(cpu_before, cpu_after)
        if share is not None:
            env["foreign_cpu_share"] = share
        own = hostload.own_cpu_share(cpu_before, cpu_after)
        if own is not None:
            env["own_cpu_share"] = own
        env["trial_wall_s"] = time.monotonic() - t0
        env["session_startup_s"] = self.startup_s
        env["host_load_before_1m"] = load_before
        ranks = payload["ranks"]
        losses = {r["rank"]: r["losses"] for r in ranks if r["role"] == "worker"}
        return TrialResult(aggregate(ranks, self.config, env), losses, time.monotonic() - t0, trial)


#: What a rank prints when it dies only because a peer died first.
_PEER_LOSS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")


def _peer_loss(tail: str) -> bool:
    return any(marker in tail for marker in _PEER_LOSS)


def _tail(path: Path, lines: int = 1) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no stderr)"
    # c10d's start-up warnings ("[W1122 ...] ...") are noise, not the reason a rank died.
    useful = [t for t in text if t.strip() and not _WARNING.match(t)]
    return " | ".join(useful[-lines:]) if useful else "(no stderr)"


def run_trial(
    model: ModelSpec,
    cluster: ClusterSpec,
    strategy: Strategy,
    launcher: Launcher,
    config: ExecutorConfig | None = None,
) -> Measurement:
    """One strategy in a fresh session (starts and ends its processes)."""
    with ExecutorSession(model, cluster, launcher, config) as session:
        return session.run(strategy)
