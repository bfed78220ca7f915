"""Start one node of a trial attempt with torchrun (c10d rendezvous), and end it without leaks.

Every agent of the gang runs ``torchrun_argv``: ``python -m torch.distributed.run --nnodes N
--nproc-per-node P --node-rank R --rdzv-backend c10d --rdzv-endpoint <node 0>:<port> --rdzv-id
trial<id>-<attempt> --max-restarts 0 --local-addr <host> -m runtime.agent.rank_main ...``. Node 0
hosts the rendezvous store (``is_host``); ``join_timeout`` bounds the wait for the others.
torchrun runs in its own session with PR_SET_PDEATHSIG (it dies with its agent), its ranks set
the same against torchrun, so killing an agent ends every local rank; ``stop`` kills the session.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class NodeLaunch:
    """What one agent needs to start its node of an attempt."""

    nnodes: int
    nproc: int
    node_rank: int
    rdzv_endpoint: str
    rdzv_id: str
    local_addr: str
    job: Path
    join_timeout_s: float = 60.0


def torchrun_argv(n: NodeLaunch) -> list[str]:
    return [*torchrun_prefix(n), "-m", "runtime.agent.rank_main", "--job", str(n.job),
            "--node-rank", str(n.node_rank)]  # fmt: skip


def torchrun_prefix(n: NodeLaunch) -> list[str]:
    """``python -m torch.distributed.run`` and its options for node ``n``, without the entry point
    (``-m module args`` or ``script args`` follow): the agents' and the launch benchmarks' one argv."""
    conf = f"join_timeout={int(n.join_timeout_s)},is_host={'true' if n.node_rank == 0 else 'false'}"
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(n.nnodes),
            "--nproc-per-node", str(n.nproc), "--node-rank", str(n.node_rank), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", n.rdzv_endpoint, "--rdzv-id", n.rdzv_id, "--rdzv-conf", conf,
            "--max-restarts", "0", "--local-addr", n.local_addr, "--monitor-interval", "0.2"]  # fmt: skip


def _pdeathsig() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start(n: NodeLaunch, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start torchrun for node ``n`` (stdout and stderr to ``log``); call from the main thread
    (PR_SET_PDEATHSIG fires when the spawning *thread* exits)."""
    full = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    full["STRATEGIST_AGENT_PID"] = str(os.getpid())  # the ranks' watchdog (rank_main.die_with_parent)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    with log.open("wb") as f:
        return subprocess.Popen(
            torchrun_argv(n), env=full, stdout=f, stderr=subprocess.STDOUT, cwd=str(REPO_ROOT),
            start_new_session=True, preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,
        )  # fmt: skip


def stop(p: subprocess.Popen[bytes], grace_s: float = 2.0) -> int:
    """End torchrun and its ranks (SIGTERM to the session, SIGKILL after ``grace_s``); exit code."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if p.poll() is not None:
            break
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):  # ranks left in the session
        os.killpg(p.pid, signal.SIGKILL)
    return p.wait()


def tail(log: Path, lines: int = 3) -> str:
    """The last useful lines of a torchrun log (the failure reason): the ranks' exception lines
    when there are any (torchrun's own summary, ``error_file: <N/A>``, says nothing), else lines
    naming an error, else the last lines."""
    try:
        text = [t for t in log.read_text(errors="replace").splitlines() if t.strip()]
    except OSError:
        return "(no log)"
    raised = [t.strip() for t in text if _RAISED.match(t)]  # a rank's exception line ("FooError: why")
    if raised:
        return " | ".join(dict.fromkeys(raised[-lines:]))[:1500]
    err = [t for t in text if "Error" in t or "error" in t]
    return " | ".join((err or text)[-lines:])[:1500]


#: The last line of a Python traceback: ``[module.]SomeError: message`` (also ``...Exception:``).
_RAISED = re.compile(r"^\s*(\[[^\]]*\]:?\s*)?([A-Za-z_][\w.]*\.)?\w*(Error|Exception|Interrupt)\b: ")
