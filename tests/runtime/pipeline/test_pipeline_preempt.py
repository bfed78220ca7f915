"""Preemption traces: validation, the on/off pattern, and background flows in testbed namespaces."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.pipeline.preempt import Background, Flow, PreemptionTrace
from runtime.testbed import Testbed, netns
from simulator.spec import ClusterSpec, DeviceType, Node


def test_trace_pattern_repeats_and_round_trips(tmp_path: Path) -> None:
    tr = PreemptionTrace(
        flows=(Flow(src=0, dst=1, start_s=0.5, end_s=1.0), Flow(src=1, dst=0, start_s=0.0, end_s=0.2)),
        period_s=2.0,
    )
    assert [f.src for f in tr.active(0.1)] == [1]
    assert [f.src for f in tr.active(0.7)] == [0]
    assert tr.active(1.5) == []
    assert [f.src for f in tr.active(4.7)] == [0]  # 4.7 = 2 periods + 0.7
    path = tmp_path / "trace.json"
    path.write_text(tr.model_dump_json())
    assert PreemptionTrace.load(path) == tr
    once = PreemptionTrace(flows=(Flow(src=0, dst=1, start_s=1.0, end_s=2.0),))
    assert once.active(1.5) and not once.active(3.5)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"flows": [{"src": 0, "dst": 0, "start_s": 0, "end_s": 1}]}, "dst"),
        ({"flows": [{"src": 0, "dst": 1, "start_s": 2, "end_s": 1}]}, "end_s"),
        ({"flows": [{"src": 0, "dst": 1, "start_s": 0, "end_s": 3}], "period_s": 2}, "flows.0.end_s"),
        ({"flows": []}, "flows"),
    ],
)
def test_bad_traces_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field.split(".")[-1]):
        PreemptionTrace.model_validate_json(json.dumps(data))


_NETNS = netns.namespaces_usable()


@pytest.mark.netns
@pytest.mark.skipif(_NETNS is not None, reason=f"no netns: {_NETNS}")
def test_background_flows_run_inside_the_nodes_and_stop() -> None:
    gpu = DeviceType(name="g", fp32_tflops=1.0, fp16_tflops=2.0, memory_gb=1.0, memory_bw_gbs=1.0)
    cl = ClusterSpec(
        name="two", device_types=(gpu,), nodes=tuple(Node(name=f"n{i}", device="g", gpus=1, nic_gbps=0.1) for i in range(2)),
        intra_node_gbps=1.0,
    )  # fmt: skip
    # on for the first 2 s of every 4 s: node 0 sends while on, and (nearly) nothing while off.
    # Measured in the second period: on a loaded host the flow processes (Python start-up, the
    # sender reconnecting until the sink listens) can miss much of the first window.
    tr = PreemptionTrace(flows=(Flow(src=0, dst=1, start_s=0.0, end_s=2.0),), period_s=4.0)
    with Testbed(cl, scale=1.0) as tb, Background(tr, tb) as bg:
        time.sleep(max(0.0, bg.t0 + 4.5 - time.monotonic()))
        on_0 = _tx_bytes(tb.node_ns[0])
        time.sleep(1.0)
        on_1 = _tx_bytes(tb.node_ns[0])
        time.sleep(max(0.0, bg.t0 + 6.5 - time.monotonic()))
        off_0 = _tx_bytes(tb.node_ns[0])
        time.sleep(1.0)
        off_1 = _tx_bytes(tb.node_ns[0])
        assert len(bg.procs) == 2 and all(p.poll() is None for p in bg.procs)  # sink and sender alive
    assert all(p.poll() is not None for p in bg.procs)
    assert on_1 - on_0 > 2_000_000  # 100 Mbit/s link: ~12 MB/s while on
    assert off_1 - off_0 < 200_000


def _tx_bytes(ns: str) -> int:
    out = netns.run(["ip", "-n", ns, "-s", "-j", "link", "show", "eth0"]).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


class _Recorder:
    """A launcher that records what it would start (and starts a process that exits at once)."""

    def __init__(self) -> None:
        self.argvs: list[list[str]] = []

    def address(self, node: int) -> str:
        return f"10.0.0.{node + 1}"

    def spawn(self, node: int, argv: list[str], env: dict[str, str], **kw: object) -> subprocess.Popen[bytes]:
        self.argvs.append(list(argv))
        return subprocess.Popen(["true"])


def test_a_dilated_run_stretches_the_trace_windows() -> None:
    tr = PreemptionTrace(flows=(Flow(src=0, dst=1, start_s=0.5, end_s=1.5),), period_s=3.0)
    rec = _Recorder()
    with Background(tr, rec, time_scale=4.0):  # type: ignore[arg-type]
        pass
    send = next(a for a in rec.argvs if "send" in a)
    i = send.index("--window")
    assert [float(x) for x in send[i + 1 : i + 3]] == [2.0, 6.0]
    assert float(send[send.index("--period") + 1]) == 12.0
    with pytest.raises(ValueError, match="time_scale"):
        Background(tr, rec, time_scale=0.0)  # type: ignore[arg-type]
