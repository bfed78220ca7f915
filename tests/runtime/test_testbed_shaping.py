"""The testbed's tc command lists and scale choice (no root needed)."""

from __future__ import annotations

import pytest

from runtime.testbed import dilated_scales, suggest_dilation, suggest_scale
from runtime.testbed.shaping import Shape, burst_bytes, limit_bytes, tc_commands
from simulator.spec import ClusterSpec, DeviceType, Node

GPU = DeviceType(name="g", fp32_tflops=10, fp16_tflops=20, memory_gb=16, memory_bw_gbs=900)


def cluster(gbps: list[float]) -> ClusterSpec:
    nodes = tuple(Node(name=f"n{i}", device="g", gpus=1, nic_gbps=g) for i, g in enumerate(gbps))
    return ClusterSpec(name="t", device_types=(GPU,), nodes=nodes, intra_node_gbps=100)


def test_tbf_only_without_delay_or_cap() -> None:
    (cmd,) = tc_commands("eth0", Shape(200.0), netem=True)
    assert cmd[:7] == ["tc", "qdisc", "add", "dev", "eth0", "root", "handle"]
    assert cmd[cmd.index("rate") + 1] == "200000kbit"
    # 10 ms of 200 Mbit/s = 250 kB of burst; 50 ms = 1.25 MB of queue
    assert cmd[cmd.index("burst") + 1] == "250000" and cmd[cmd.index("limit") + 1] == "1250000"


def test_small_rates_keep_minimum_buffers() -> None:
    assert burst_bytes(1.0) == 32 * 1024 and limit_bytes(1.0) == 256 * 1024


def test_netem_parent_with_tbf_child_only_when_delay_and_netem() -> None:
    cmds = tc_commands("p0", Shape(100.0, delay_us=25.0), netem=True)
    assert cmds[0][5:9] == ["root", "handle", "1:", "netem"]
    assert cmds[1][5:10] == ["parent", "1:1", "handle", "10:", "tbf"]
    assert cmds[0][cmds[0].index("delay") + 1] == "25us"
    assert len(tc_commands("p0", Shape(100.0, delay_us=25.0), netem=False)) == 1


def test_flow_cap_builds_htb_class_and_filter_per_destination() -> None:
    cmds = tc_commands(
        "eth0", Shape(400.0, flow_caps={"198.18.0.2": 100.0, "198.18.0.3": 500.0}), netem=False
    )
    kinds = [c[1] for c in cmds]
    # root htb, link class, one capped class + its filter (the 500 cap is above the link: dropped), default
    assert kinds == ["qdisc", "class", "class", "filter", "class"]
    capped = cmds[2]
    assert capped[capped.index("ceil") + 1] == "100000kbit"
    assert "198.18.0.2/32" in cmds[3] and cmds[3][-1] == capped[capped.index("classid") + 1]


def test_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rate_mbit"):
        tc_commands("eth0", Shape(0.0), netem=False)


def test_suggest_scale_bounds_the_aggregate_rate() -> None:
    # 11 nodes x 10 Gbit/s = 110 Gbit/s; <= 1.5 Gbit/s needs >= 73.3 -> next round value 80
    assert suggest_scale(cluster([10.0] * 11)) == 80.0
    assert suggest_scale(cluster([0.1, 0.1])) == 1.0
    with pytest.raises(ValueError, match="slowest link"):
        suggest_scale(cluster([100.0] * 10 + [0.1]))


def test_dilation_grows_with_the_processes_and_keeps_the_link_rates() -> None:
    # processes = GPUs + one PS server per node; D = ceil(processes / 3), at most 8
    assert suggest_dilation(cluster([10.0])) == 1.0  # 2 processes
    assert suggest_dilation(cluster([10.0] * 2)) == 2.0  # 4
    assert suggest_dilation(cluster([10.0] * 11)) == 8.0  # 22 -> ceil(7.3)
    assert suggest_dilation(cluster([10.0] * 20)) == 8.0  # 40 -> capped
    scale, d = dilated_scales(cluster([10.0] * 11))
    assert (scale, d) == (80.0 / 8, 8.0)  # the testbed divides bandwidth by scale x D = 80
    assert dilated_scales(cluster([10.0] * 11), 4.0) == (20.0, 4.0)
    assert dilated_scales(cluster([0.1, 0.1]), 6.0) == (1.0, 1.0)  # bytes scale never below 1
