"""A testbed whose process gets SIGTERM at any moment of its build (a worker's trial process when its
worker, or `strategist serve`, dies) leaves no namespace behind. Before the fix, a SIGTERM during
``ip netns add`` left that namespace unrecorded, so teardown missed it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from runtime.testbed import netns

pytestmark = pytest.mark.netns

CHILD = """
import sys, time
from runtime.testbed import Testbed
from simulator.spec import ClusterSpec, DeviceType, Node
g = DeviceType(name="g", fp32_tflops=10, fp16_tflops=20, memory_gb=16, memory_bw_gbs=900)
nodes = tuple(Node(name=f"n{i}", device="g", gpus=1, nic_gbps=10) for i in range(4))
cluster = ClusterSpec(name="t", device_types=(g,), nodes=nodes, intra_node_gbps=100)
print("building", flush=True)
t = time.monotonic()
with Testbed(cluster, scale=10.0):
    print(f"built {time.monotonic() - t:.3f}", flush=True)
    time.sleep(120)
"""


def owned_by(pid: int) -> list[str]:
    return [ns for ns in netns.list_namespaces() if ns.startswith(f"stb-{pid}-")]


def terminate_after(delay_s: float) -> tuple[int, str]:
    """Start a testbed build, SIGTERM it ``delay_s`` after it began; (pid, its last line)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "building"
    time.sleep(delay_s)
    child.send_signal(signal.SIGTERM)
    rest = child.communicate(timeout=60)[0]
    return child.pid, rest.strip()


def test_sigterm_at_any_moment_of_the_build_leaves_no_namespace() -> None:
    if netns.namespaces_usable() is not None:
        pytest.skip(f"network namespaces unavailable: {netns.namespaces_usable()}")
    seen_built = False
    for delay in (0.0, 0.05, 0.1, 0.2, 0.35, 0.6, 3.0):
        pid, last = terminate_after(delay)
        seen_built |= last.startswith("built")
        assert owned_by(pid) == [], f"SIGTERM {delay} s into the build left {owned_by(pid)}"
    assert seen_built  # the last delay hits a testbed that was up: teardown of a built one too
