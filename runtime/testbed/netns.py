"""Thin wrappers over iproute2 (`ip`, `tc`): namespaces, veth pairs, bridges, and their probes.

Every call runs a real command and raises :class:`NetnsError` with the command line and its stderr
when it fails, so a broken testbed says exactly which step broke.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Sequence
from functools import cache
from types import FrameType
from typing import Any


class NetnsError(RuntimeError):
    """An `ip`/`tc` command failed, or network namespaces cannot be used here."""


def run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one iproute2 command; on failure raise NetnsError naming the command and its stderr."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def in_ns(ns: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside namespace ``ns``."""
    return ["ip", "netns", "exec", ns, *argv]


def list_namespaces() -> list[str]:
    """Names of all named network namespaces (``ip netns list``)."""
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def add_namespace(name: str) -> None:
    run(["ip", "netns", "add", name])
    run(["ip", "-n", name, "link", "set", "lo", "up"])


def delete_namespace(name: str) -> None:
    """Delete ``name`` (its veth ends go with it, which also removes their peers); absent is fine."""
    run(["ip", "netns", "del", name], check=False)


def namespace_pids(name: str) -> list[int]:
    """Processes that live in namespace ``name``."""
    out = run(["ip", "netns", "pids", name], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def add_bridge(ns: str, name: str) -> None:
    run(["ip", "-n", ns, "link", "add", name, "type", "bridge"])
    run(["ip", "-n", ns, "link", "set", name, "up"])


def add_veth(ns_a: str, name_a: str, ns_b: str, name_b: str) -> None:
    """A veth pair created directly inside two namespaces (no name ever exists in the root one)."""
    run(["ip", "link", "add", "name", name_a, "netns", ns_a, "type", "veth", "peer", "name", name_b,
         "netns", ns_b])  # fmt: skip


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@cache
def qdisc_available(kind: str) -> bool:
    """Whether this kernel has qdisc ``kind`` (e.g. netem is often not built into small VMs' kernels)."""
    probe = f"stbprobe-{os.getpid()}"
    try:
        add_namespace(probe)
        ok = run(in_ns(probe, ["tc", "qdisc", "add", "dev", "lo", "root", kind]), check=False).returncode == 0
    finally:
        delete_namespace(probe)
    return ok


def namespaces_usable() -> str | None:
    """None if network namespaces can be created here, else the reason they cannot."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (`ip`, `tc`) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, as developers and CI do)"
    probe = f"stbprobe-{os.getpid()}"
    try:
        add_namespace(probe)
    except NetnsError as e:
        return f"`ip netns add` failed: {e}"
    finally:
        delete_namespace(probe)
    return None


def valid_ifname(name: str) -> bool:
    """Linux interface names: 1-15 characters, no '/', ':' or whitespace."""
    return 0 < len(name) <= 15 and re.fullmatch(r"[^/:\s]+", name) is not None


def destroy_namespace(name: str) -> None:
    """SIGKILL whatever still runs inside namespace ``name``, then delete it."""
    for pid in namespace_pids(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    delete_namespace(name)


def sigterm_as_exit() -> Any:
    """While namespaces are up, make SIGTERM raise SystemExit so ``with`` blocks unwind and tear
    them down. Returns the handler to restore (None: nothing installed: not the main thread, or
    someone else already handles SIGTERM)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def _exit(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, _exit)


def restore_sigterm(old: Any) -> None:
    """Undo ``sigterm_as_exit`` (``old`` is what it returned; None does nothing)."""
    if old is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, old)
