"""Which zoo clusters fit this machine: build each at its suggested scale and measure a full world.

``python -m runtime.testbed.fit [CLUSTER ...]`` builds the testbed of each cluster, starts one
process per GPU plus one PS server process per node (the executor's process count), all-reduces
``--mbytes`` across all of them and prints a table: processes, start-up time, bus bandwidth
against the rate the slowest link should give, and a verdict. With ranks ordered node by node the
ring crosses each node's link once each way, so the expected bus bandwidth is the slowest shaped
link (capped per flow by ``single_flow_gbps``). A cluster "fits" when it builds, every process
starts within the timeout and the bus bandwidth is within 15% of the expected rate.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from dataclasses import dataclass

from runtime.testbed.fallback import suggest_scale
from runtime.testbed.run_probe import run_probe
from runtime.testbed.testbed import Testbed
from simulator import zoo
from simulator.spec import ClusterSpec

TOLERANCE = 0.15


@dataclass(frozen=True)
class FitResult:
    """One cluster's check."""

    cluster: str
    nodes: int
    processes: int  # GPUs + one server per node
    scale: float
    expected_mbit: float
    bus_mbit: float | None
    wall_s: float
    verdict: str


def expected_bus_mbit(bed: Testbed) -> float:
    slowest = min(bed.rate_mbit(i) for i in range(len(bed.cluster.nodes)))
    cap = bed.flow_cap_mbit()
    return min(slowest, cap) if cap is not None else slowest


def check(cluster: ClusterSpec, mbytes: float, timeout: float) -> FitResult:
    """Build ``cluster``'s testbed at its suggested scale and all-reduce over every process."""
    ranks = [i for i, n in enumerate(cluster.nodes) for _ in range(n.gpus + 1)]
    t0 = time.monotonic()
    try:
        scale = suggest_scale(cluster)
    except ValueError as e:
        return FitResult(cluster.name, len(cluster.nodes), len(ranks), 0.0, 0.0, None, 0.0, f"no: {e}")
    with Testbed(cluster, scale) as bed:
        expected = expected_bus_mbit(bed)
        try:
            r = run_probe(bed, ["allreduce"], ranks, int(mbytes * 1e6), iters=3, timeout=timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return FitResult(cluster.name, len(cluster.nodes), len(ranks), scale, expected, None,
                             time.monotonic() - t0, f"no: {str(e)[:80]}")  # fmt: skip
    n = len(ranks)
    bus = 2 * (n - 1) / n * r["bytes"] * 8 / r["allreduce"]["median_s"] / 1e6
    if len(cluster.nodes) == 1:
        return FitResult(cluster.name, 1, n, scale, expected, bus, time.monotonic() - t0,
                         "yes (one node: all processes started; loopback only, nothing shaped)")  # fmt: skip
    ok = abs(bus / expected - 1) <= TOLERANCE
    verdict = "yes" if ok else f"no: bus bandwidth {bus / expected:.0%} of the shaped rate"
    return FitResult(
        cluster.name, len(cluster.nodes), n, scale, expected, bus, time.monotonic() - t0, verdict
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("clusters", nargs="*", help="zoo cluster names (default: all)")
    p.add_argument("--mbytes", type=float, default=4.0, help="all-reduce size, MB")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for the probe processes")
    a = p.parse_args(argv)
    print("| cluster | nodes | processes | scale | expected Mbit/s | bus Mbit/s | wall s | fits |")
    print("|---|---|---|---|---|---|---|---|")
    for name in a.clusters or zoo.cluster_names():
        r = check(zoo.cluster(name), a.mbytes, a.timeout)
        bus = f"{r.bus_mbit:.0f}" if r.bus_mbit is not None else "-"
        print(f"| {r.cluster} | {r.nodes} | {r.processes} | {r.scale:g} | {r.expected_mbit:.0f} | {bus} "
              f"| {r.wall_s:.0f} | {r.verdict} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
