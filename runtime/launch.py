"""Starting the processes of a trial: the Launcher protocol (where a process runs) and ``Gang``
(how the N processes of one run are started, watched and ended), shared by every plan kind.

A launcher places a process on a node: ``runtime.executor.LocalLauncher`` (loopback),
``runtime.testbed.Testbed`` (a node's namespace, one shaped NIC), ``runtime.testbed.multihomed``
(a node on several shaped networks). ``Gang`` starts the ranks of one run on such nodes with the
variables ``torch.distributed``'s ``env://`` rendezvous reads (MASTER_ADDR / MASTER_PORT / RANK /
WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE, as torchrun sets them), waits with a deadline, ends
every rank at the first failure, and returns each rank's exit code and stderr tail.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Literal, Protocol


class Launcher(Protocol):
    """Starts a process "on" a node of a cluster.

    Contract: ``master_addr`` is an address every node's processes can reach and bind on node 0;
    ``address(node)`` is the address of that node as seen by the others; ``spawn`` starts ``argv``
    on ``node`` with ``env`` added to the environment (the launcher adds the variables its network
    needs, e.g. GLOO_SOCKET_IFNAME) and returns the running process; the caller owns the process
    and must wait for or kill it.
    """

    @property
    def master_addr(self) -> str: ...

    def address(self, node: int) -> str: ...

    def spawn(
        self, node: int, argv: Sequence[str], env: Mapping[str, str], **popen_kwargs: object
    ) -> subprocess.Popen[bytes]: ...


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (a short race until someone binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class RankExit:
    """How one rank of a gang ended; ``killed``: it still ran when the gang ended it."""

    rank: int
    node: int
    returncode: int
    stderr_tail: str  # the last non-empty stderr line ('' if none)
    killed: bool = False


@dataclass(frozen=True)
class GangResult:
    """``status`` 'ok' (every rank exited 0), 'failed' (``failed`` is the first rank seen to exit
    non-zero) or 'timeout' (the deadline passed first); ``reason`` says which, '' when ok."""

    status: Literal["ok", "failed", "timeout"]
    exits: tuple[RankExit, ...]
    failed: RankExit | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Gang:
    """The ranks of one run, one process each, on ``launcher``'s nodes; a context manager that
    kills whatever still runs on exit.

    ``nodes[r]`` is rank r's node; ``argv(r)`` its command line. With ``dist`` every rank gets
    torch.distributed's environment (master: rank 0's node, on ``port`` or a free one). Ranks in
    ``pipes`` get stdin and stdout pipes (``procs[r].stdin/stdout``), the others /dev/null; stderr
    goes to a temporary file whose last line ends up in ``RankExit.stderr_tail`` (a file, not a
    pipe: a rank that writes much to stderr never blocks on a pipe nobody reads).
    """

    def __init__(
        self,
        launcher: Launcher,
        nodes: Sequence[int],
        argv: Callable[[int], Sequence[str]],
        *,
        env: Mapping[str, str] | None = None,
        dist: bool = True,
        port: int | None = None,
        pipes: Collection[int] = (),
    ) -> None:
        if not nodes:
            raise ValueError("nodes: a gang needs at least one rank")
        self.launcher = launcher
        self.nodes = list(nodes)
        self.argv = argv
        self.env = dict(env or {})
        self.dist = dist
        self.port = port
        self.pipes = set(pipes)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._errs: list[IO[bytes]] = []
        self._failed: int | None = None  # the first rank seen to exit non-zero

    def rank_env(self, rank: int) -> dict[str, str]:
        """The variables rank ``rank`` starts with (torchrun's names, plus ``env``)."""
        if not self.dist:
            return dict(self.env)
        if self.port is None:
            self.port = free_port()
        node = self.nodes[rank]
        local = [r for r, n in enumerate(self.nodes) if n == node]
        return {
            **self.env,
            "MASTER_ADDR": self.launcher.address(self.nodes[0]),
            "MASTER_PORT": str(self.port),
            "RANK": str(rank),
            "WORLD_SIZE": str(len(self.nodes)),
            "LOCAL_RANK": str(local.index(rank)),
            "LOCAL_WORLD_SIZE": str(len(local)),
        }

    def start(self) -> Gang:
        """Start every rank, in rank order; a failing spawn kills the ranks already started."""
        try:
            for rank, node in enumerate(self.nodes):
                self._errs.append(tempfile.TemporaryFile(prefix=f"strategist-rank{rank}-"))  # noqa: SIM115
                io = subprocess.PIPE if rank in self.pipes else subprocess.DEVNULL
                argv, env = list(self.argv(rank)), self.rank_env(rank)
                self.procs.append(
                    self.launcher.spawn(node, argv, env, stdin=io, stdout=io, stderr=self._errs[-1])
                )
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> Gang:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def poll_failure(self) -> int | None:
        """The first rank seen to exit non-zero so far (None: none yet)."""
        if self._failed is None:
            self._failed = next((r for r, p in enumerate(self.procs) if p.poll() not in (None, 0)), None)
        return self._failed

    def wait(self, deadline: float, *, timeout_reason: str = "timeout: the run took longer than its deadline",
             poll_s: float = 0.02) -> GangResult:  # fmt: skip
        """Wait until every rank exited 0, one failed, or ``deadline`` (``time.monotonic``) passed;
        then kill every rank still running and report."""
        while any(p.poll() is None for p in self.procs):
            if self.poll_failure() is not None or time.monotonic() > deadline:
                break
            time.sleep(poll_s)
        failed = self.poll_failure()
        running = {r for r, p in enumerate(self.procs) if p.poll() is None}
        self.kill()
        exits = tuple(
            RankExit(r, self.nodes[r], p.returncode, self.stderr_tail(r), r in running)
            for r, p in enumerate(self.procs)
        )
        if failed is not None:
            e = exits[failed]
            return GangResult(
                "failed", exits, e, f"rank {failed} exited with code {e.returncode}: {e.stderr_tail}"
            )
        if running:
            return GangResult("timeout", exits, None, timeout_reason)
        return GangResult("ok", exits)

    def stderr_tail(self, rank: int) -> str:
        """Rank ``rank``'s last stderr line so far ('' if none, or once the gang is closed)."""
        if rank >= len(self._errs) or self._errs[rank].closed:
            return ""
        f = self._errs[rank]
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 8192))
        lines = f.read().decode(errors="replace").strip().splitlines()
        return lines[-1].strip() if lines else ""

    def kill(self) -> None:
        """SIGKILL every rank still running and reap them all (idempotent; pipes stay open)."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)

    def close(self) -> None:
        """``kill``, then close the pipes and the stderr files (idempotent)."""
        self.kill()
        for f in [*self._errs, *(s for p in self.procs for s in (p.stdin, p.stdout) if s is not None)]:
            with contextlib.suppress(OSError):
                f.close()
