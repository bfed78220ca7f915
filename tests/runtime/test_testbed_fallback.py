"""make_launcher falls back to unshaped loopback, loudly, only where namespaces are unavailable."""

from __future__ import annotations

import pytest

from runtime.testbed import TestbedUnavailable, fallback, make_launcher, netns, testbed
from simulator.spec import ClusterSpec, DeviceType, Node

GPU = DeviceType(name="g", fp32_tflops=10, fp16_tflops=20, memory_gb=16, memory_bw_gbs=900)
CLUSTER = ClusterSpec(name="t", device_types=(GPU,), intra_node_gbps=100,
                      nodes=(Node(name="a", device="g", gpus=1, nic_gbps=1.0),))  # fmt: skip


def test_fallback_is_flagged_and_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testbed.netns, "namespaces_usable", lambda: "not root")
    with pytest.warns(RuntimeWarning, match="UNSHAPED"), make_launcher(CLUSTER, 10.0) as launcher:
        assert isinstance(launcher, fallback.UnshapedLauncher)
        assert (
            launcher.environment["shaped"] is False and "not root" in launcher.environment["fallback_reason"]
        )
        assert launcher.master_addr == "127.0.0.1"


def test_no_fallback_raises_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testbed.netns, "namespaces_usable", lambda: "not root")
    with (
        pytest.raises(TestbedUnavailable, match="cannot build the emulated cluster: not root"),
        make_launcher(CLUSTER, 10.0, allow_fallback=False),
    ):
        pass


@pytest.mark.netns
@pytest.mark.skipif(netns.namespaces_usable() is not None, reason="network namespaces unavailable")
def test_testbed_when_namespaces_work() -> None:
    with make_launcher(CLUSTER, 10.0) as launcher:
        assert launcher.environment["shaped"] is True and launcher.environment["rates_mbit"] == [100.0]
