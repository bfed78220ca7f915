"""Background load during a trial: the share of the host's CPU that *other* processes used.

The emulated cluster's times are only as good as the host is quiet: a compile or a test suite
beside a trial steals the cores its processes need to wake up and move bytes. The 1-minute load
average reacts too slowly (and counts the trial's own previous work), so a trial measures
directly: busy CPU seconds of the whole host (``/proc/stat``) minus the CPU seconds of the
session's own processes (``/proc/<pid>/stat``, threads included), over the trial's wall time and
the host's cores. ``foreign_cpu_share`` 0 means nothing else ran; 1 means other processes kept
every core busy. Linux only; elsewhere the snapshot is None and nothing is recorded.

``own_cpu_share`` is the other side: the share of the host's CPU capacity the session's own
processes used. Near 1 the trial saturated the host: its times then measure how fast two cores
push messages through gloo and Python, not the emulated links, and a larger time dilation is
needed (runtime/testbed/README.md, "Host saturation").
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds used so far: by the whole host (busy, not idle/iowait) and by ``pids``."""

    wall: float
    host_busy_s: float
    own_s: float


def _host_busy_s() -> float:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    guest = sum(ticks[8:10]) if len(ticks) > 9 else 0  # already counted in user/nice
    return (sum(ticks) - idle - guest) / _TICK


def _proc_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:  # the process has gone: its time is lost from both sides alike
        return 0.0
    # fields after the command: state=0 ... utime=11, stime=12, cutime=13, cstime=14
    return sum(int(x) for x in rest[11:15]) / _TICK


def snapshot(pids: Iterable[int]) -> CpuSnapshot | None:
    """The CPU seconds used so far by the host and by ``pids`` (None where /proc is missing)."""
    try:
        host = _host_busy_s()
    except (OSError, ValueError, IndexError):
        return None
    return CpuSnapshot(time.monotonic(), host, sum(_proc_s(p) for p in pids))


def foreign_cpu_share(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """The share of the host's CPU capacity used by other processes between two snapshots."""
    if before is None or after is None or after.wall <= before.wall:
        return None
    cores = os.cpu_count() or 1
    foreign = (after.host_busy_s - before.host_busy_s) - (after.own_s - before.own_s)
    return max(0.0, foreign) / ((after.wall - before.wall) * cores)


def own_cpu_share(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """The share of the host's CPU capacity the session's own processes used between two snapshots."""
    if before is None or after is None or after.wall <= before.wall:
        return None
    cores = os.cpu_count() or 1
    return max(0.0, after.own_s - before.own_s) / ((after.wall - before.wall) * cores)
