"""Choosing a launcher for a trial: the testbed when namespaces work, else unshaped loopback.

Also ``suggest_scale``: how far to divide bytes and bandwidth so the emulated cluster fits the
machine (see runtime/testbed/README.md, "Choosing the scale"), and ``suggest_dilation`` /
``dilated_scales``: how much slower than the real cluster to run it so that this host's fixed
per-call costs stay small (README, "Time dilation").
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from runtime.launch import Launcher
from runtime.testbed.testbed import Testbed, TestbedUnavailable
from simulator.spec import ClusterSpec

# Aggregate rate two shared cores push through gloo while also running the trial's processes
# (measured: runtime/testbed/README.md); above it the CPU, not the shaper, sets the speed.
MAX_TOTAL_MBIT = 1500.0
# Below this per-link rate, per-packet timer granularity and TCP start-up distort the shaping.
MIN_LINK_MBIT = 20.0


def suggest_scale(
    cluster: ClusterSpec, *, max_total_mbit: float = MAX_TOTAL_MBIT, min_link_mbit: float = MIN_LINK_MBIT
) -> float:
    """The smallest "round" scale at which the sum of all shaped NIC rates stays <= max_total_mbit.

    Every node may send at its full rate at once (a ring all-reduce does), so the aggregate is the
    sum of the NIC rates. Raises ValueError if that scale would push the slowest link below
    ``min_link_mbit`` (the cluster does not fit this machine at a faithful rate).
    """
    total = sum(n.nic_gbps for n in cluster.nodes) * 1000
    raw = max(1.0, total / max_total_mbit)
    mag = 10 ** math.floor(math.log10(raw))
    scale = next(m * mag for m in (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if m * mag >= raw - 1e-9)
    slowest = min(n.nic_gbps for n in cluster.nodes) * 1000 / scale
    if slowest < min_link_mbit:
        raise ValueError(
            f"cluster {cluster.name!r}: scale {scale:g} keeps the aggregate <= {max_total_mbit:g} Mbit/s "
            f"but shapes the slowest link to {slowest:.1f} Mbit/s (< {min_link_mbit:g})"
        )
    return float(scale)


#: Processes of a session per unit of time dilation (``suggest_dilation``): measured on this
#: 2-core host, one 1-element gloo call (all-reduce or PS round) costs about 0.3 ms per process
#: of the session (7-8 ms with 22 processes on A2 under load, 2026-11-23), so D = processes / 3
#: brings the dilated per-call overhead to about 1 ms, a real TCP cluster's order of magnitude.
PROCESSES_PER_DILATION = 3.0
#: Upper bound of the suggested dilation: a trial runs D times longer than the real cluster's.
MAX_DILATION = 8.0


def suggest_dilation(cluster: ClusterSpec, *, max_dilation: float = MAX_DILATION) -> float:
    """Time dilation D for ``cluster``'s testbed: ceil(processes / 3), within [1, max_dilation].

    Processes = GPUs + one PS server per node (the executor's layout). The measured per-call
    overhead of every trial is stored with it (``per_call_overhead_s``, already divided by D), so
    a D that proved too small on another host shows in the records (benchmarks/testbed_fidelity.py).
    """
    processes = cluster.num_gpus + len(cluster.nodes)
    return float(min(max_dilation, max(1, math.ceil(processes / PROCESSES_PER_DILATION))))


def dilated_scales(cluster: ClusterSpec, dilation: float | None = None) -> tuple[float, float]:
    """(bytes scale, dilation) for replaying ``cluster``: links keep ``suggest_scale``'s rates.

    The testbed divides bandwidth by ``scale × D`` = ``suggest_scale(cluster)`` (the rates whose
    shaping fidelity was measured), so bytes are divided by ``suggest_scale / D`` only: messages
    are D times larger than without dilation and every transfer takes D times longer, as does
    the replayed compute. D is lowered where it would make the bytes scale fall below 1.
    """
    link = suggest_scale(cluster)
    d = suggest_dilation(cluster) if dilation is None else dilation
    d = max(1.0, min(d, link))
    return link / d, d


class UnshapedLauncher:
    """A loopback launcher standing in for the testbed, marked as unshaped in ``environment``."""

    def __init__(self, inner: Launcher, scale: float, reason: str) -> None:
        self._inner = inner
        self.scale = scale
        self.environment: dict[str, Any] = {
            "testbed": "loopback",
            "shaped": False,
            "scale": scale,
            "fallback_reason": reason,
        }

    @property
    def master_addr(self) -> str:
        return self._inner.master_addr

    def address(self, node: int) -> str:
        return self._inner.address(node)

    def spawn(
        self, node: int, argv: Sequence[str], env: Mapping[str, str], **popen_kwargs: Any
    ) -> subprocess.Popen[bytes]:
        return self._inner.spawn(node, argv, env, **popen_kwargs)


def _local_launcher() -> Launcher:
    from runtime.executor import LocalLauncher  # the executor's loopback launcher

    return LocalLauncher()


@contextlib.contextmanager
def make_launcher(
    cluster: ClusterSpec,
    scale: float,
    *,
    allow_fallback: bool = True,
    testbed: bool = True,
    **testbed_kwargs: Any,
) -> Iterator[Launcher]:
    """A built Testbed for ``cluster``; where namespaces are unavailable and ``allow_fallback``,
    an unshaped loopback launcher instead (with a warning, and ``environment["shaped"] = False``);
    with ``testbed=False`` the plain loopback launcher (logic tests; no ``environment``).

    Otherwise the result has ``environment`` (a dict for Measurement.environment).
    """
    if not testbed:
        yield _local_launcher()
        return
    bed = Testbed(cluster, scale, **testbed_kwargs)
    try:
        bed.build()
    except TestbedUnavailable as e:
        if not allow_fallback:
            raise
        warnings.warn(f"{e}; falling back to UNSHAPED loopback: times do not reflect the cluster's network",
                      RuntimeWarning, stacklevel=3)  # fmt: skip
        yield UnshapedLauncher(_local_launcher(), scale, str(e))
        return
    try:
        yield bed
    finally:
        bed.close()
