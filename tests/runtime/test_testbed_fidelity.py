"""Issue 5 part 6: the testbed's links deliver their shaped rates, and teardown leaves nothing behind.

Needs root and network namespaces (developers and CI have them); skipped with the reason otherwise.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.executor import ExecutorConfig, ExecutorSession
from runtime.executor.reference import linear
from runtime.testbed import Testbed, cleanup_stale, netns
from runtime.testbed.run_probe import run_probe
from simulator.spec import ClusterSpec, DeviceType, ModelSpec, Node, PSSync, Strategy, VariableStrategy

_REASON = netns.namespaces_usable()
pytestmark = [pytest.mark.netns, pytest.mark.skipif(_REASON is not None, reason=f"no netns: {_REASON}")]

GPU = DeviceType(name="g", fp32_tflops=10, fp16_tflops=20, memory_gb=16, memory_bw_gbs=900)


def cluster(gbps: list[float], single_flow: float | None = None) -> ClusterSpec:
    nodes = tuple(Node(name=f"n{i}", device="g", gpus=1, nic_gbps=g) for i, g in enumerate(gbps))
    return ClusterSpec(name="t", device_types=(GPU,), nodes=nodes, intra_node_gbps=100,
                       single_flow_gbps=single_flow)  # fmt: skip


def ours() -> set[str]:
    return {n for n in netns.list_namespaces() if n.startswith("stb-")}


def test_allreduce_bus_bandwidth_within_15_percent_of_the_shaped_rate() -> None:
    # 4 nodes of 20 Gbit/s at scale 100 -> 200 Mbit/s links; ring bus bandwidth = 2(n-1)/n * B / t
    # Measured up to twice: a reading below the band is what a busy host does to 4 processes on
    # 2 cores (seen once in CI: 151 Mbit/s, 200 alone just after); one above it is a shaping bug.
    n, scale = 4, 100.0
    bus_mbit = 0.0
    with Testbed(cluster([20.0] * n), scale) as bed:
        shaped = bed.rate_mbit(0)
        for _ in range(2):
            r = run_probe(bed, ["allreduce"], list(range(n)), 4 << 20, iters=3)
            bus_mbit = 2 * (n - 1) / n * r["bytes"] * 8 / r["allreduce"]["median_s"] / 1e6
            if bus_mbit >= 0.85 * shaped:
                break
    assert shaped == pytest.approx(200.0)
    assert 0.85 * shaped <= bus_mbit <= 1.15 * shaped, f"bus {bus_mbit:.0f} Mbit/s vs shaped {shaped:.0f}"


def test_halving_a_nodes_rate_slows_a_ps_strategy_whose_servers_sit_on_it() -> None:
    # Every variable (2 x 1 MB) on node 0's server; the workers of nodes 1 and 2 push 2.1 MB each
    # into node 0 and pull 2.1 MB each back: 4.2 MB each way through node 0's 100 Mbit/s link,
    # 0.34 s if pushes and pulls overlap (full duplex), 0.67 s if they do not, against ~1 ms of
    # replayed compute. Halving node 0's NIC must double the step.
    model = ModelSpec(name="fat", batch_size=1, layers=(linear("a", 512, 512), linear("b", 512, 512)))
    strategy = Strategy(variables=tuple(VariableStrategy(variable=v.name, shards=(PSSync(server="n0"),))
                                        for v in model.variables))  # fmt: skip
    cfg = ExecutorConfig(warmup=1, iterations=3, timeout_s=60, scale=1.0)
    step = {}
    for g0 in (0.1, 0.05):
        c = cluster([g0, 0.1, 0.1])
        with Testbed(c, 1.0) as bed, ExecutorSession(model, c, bed, cfg) as session:
            m = session.run(strategy)
        assert m.ok, m.failure
        step[g0] = m.median
    one_way = 2 * model.param_bytes * 8 / 100e6
    assert 0.9 * one_way <= step[0.1] <= 1.15 * 2 * one_way, step
    assert step[0.05] / step[0.1] == pytest.approx(2.0, rel=0.2), step


def test_two_testbeds_coexist_and_the_per_flow_cap_bounds_the_ring() -> None:
    # b: 400 Mbit/s NICs, 200 Mbit/s per flow; each ring neighbour link is one flow -> ~200 Mbit/s
    before = ours()
    with Testbed(cluster([0.4, 0.4]), 1.0) as a, Testbed(cluster([0.4] * 3, single_flow=0.2), 1.0) as b:
        assert a.id != b.id and a.master_addr != b.master_addr
        assert set(a.node_ns).isdisjoint(b.node_ns)
        assert set(a.node_ns) | set(b.node_ns) | {a.switch_ns, b.switch_ns} <= ours()
        r = run_probe(b, ["allreduce"], [0, 1, 2], 2 << 20, iters=3)
    bus_mbit = 2 * 2 / 3 * r["bytes"] * 8 / r["allreduce"]["median_s"] / 1e6
    assert 0.85 * 200 <= bus_mbit <= 1.15 * 200
    assert ours() == before


def test_teardown_after_exception_kills_processes_and_namespaces() -> None:
    before = ours()
    with pytest.raises(KeyboardInterrupt), Testbed(cluster([0.4, 0.4]), 1.0) as bed:
        proc = bed.spawn(1, [sys.executable, "-c", "import time; time.sleep(60)"], {})
        assert set(bed.node_ns) <= ours()
        raise KeyboardInterrupt
    assert proc.wait(timeout=10) != 0
    assert ours() == before


def test_cleanup_stale_removes_leftovers_of_dead_owners_only() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [f"stb-{dead.pid}-abc123-sw", f"stb-{dead.pid}-abc123-n0", f"stbprobe-{dead.pid}"]
    for name in stale:
        netns.add_namespace(name)
    netns.add_veth(stale[1], "eth0", stale[0], "p0")
    with Testbed(cluster([0.4, 0.4]), 1.0, clean_stale=False) as live:
        removed = cleanup_stale()
        assert sorted(removed) == sorted(stale)
        assert set(live.node_ns) <= ours()
    assert not set(stale) & set(netns.list_namespaces())
