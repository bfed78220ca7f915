"""HybridPlan vocabulary: validation with field paths, shares, nested DP, Plan reuse, annotations, JSON."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError

from runtime.executor.reference import linear, two_by_two
from simulator.spec import (
    Annotation,
    HybridPlan,
    ModelSpec,
    Scope,
    SpecError,
    TaskGraph,
    VirtualDevice,
    hybrid_issues,
    plan_from_annotations,
    replicate,
    split,
    trace_scopes,
)
from simulator.spec.io import parse_as

MODEL = ModelSpec(
    name="mlp4", batch_size=8, layers=tuple(linear(f"l{i}", 6, 6) for i in range(4))
)  # fmt: skip
CLUSTER = two_by_two()  # nodes n0, n1 with 2 GPUs each


def vd(*devs: str) -> VirtualDevice:
    return VirtualDevice(devices=devs)


def issues_of(data: dict[str, object]) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse_as(HybridPlan, data)
    return [str(i) for i in e.value.issues]


def dp_hybrid(shares: dict[str, int] | None = None, batch: int = 12) -> dict[str, object]:
    return {
        "task_graphs": [
            {
                "first_layer": 0,
                "last_layer": 2,
                "primitive": "replicate",
                "degree": 2,
                "virtual_devices": [{"devices": ["n0:0", "n0:1"]}],
                "batch_shares": shares,
            },
            {
                "first_layer": 2,
                "last_layer": 4,
                "primitive": "split",
                "degree": 2,
                "virtual_devices": [{"devices": ["n0:0", "n0:1"]}],
            },
        ],
        "global_batch": batch,
    }


def test_uneven_shares_and_split_batches() -> None:
    p = parse_as(HybridPlan, dp_hybrid({"n0:0": 9, "n0:1": 3}))
    assert p.device_shares(0) == {"n0:0": 9, "n0:1": 3}
    assert p.device_shares(1) == {"n0:0": 12, "n0:1": 12}  # split: every shard sees the batch
    even = parse_as(HybridPlan, dp_hybrid(None, batch=7))
    assert even.device_shares(0) == {"n0:0": 4, "n0:1": 3}
    assert even.devices == ("n0:0", "n0:1")
    hybrid_issues(p, MODEL, CLUSTER) == []  # noqa: B015
    p.check(MODEL, CLUSTER)


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        (
            {"n0:0": 9, "n0:1": 4},
            "task_graphs.0.batch_shares: nested replica 0's shares sum to 13, its batch is 12",
        ),
        ({"n0:0": 12}, "task_graphs.0.batch_shares: no share for device n0:1"),
        (
            {"n0:0": 6, "n0:1": 3, "n1:0": 3},
            "task_graphs.0.batch_shares.n1:0: is not a device of this TaskGraph",
        ),
        (
            {"n0:0": 13, "n0:1": -1},
            "task_graphs.0.batch_shares.n0:1: Input should be greater than or equal to 0",
        ),
    ],
)
def test_bad_shares_name_the_field(shares: dict[str, int], expected: str) -> None:
    assert expected in issues_of(dp_hybrid(shares))


def test_structural_errors_name_the_field() -> None:
    data = dp_hybrid()
    data["task_graphs"][1]["first_layer"] = 3  # type: ignore[index]
    assert "task_graphs.1.first_layer: is 3, expected 2" in issues_of(data)
    data = dp_hybrid()
    data["task_graphs"][1]["degree"] = 4  # type: ignore[index]
    assert any(
        s.startswith("task_graphs.1.virtual_devices.0.devices: has 2 devices, degree is 4")
        for s in issues_of(data)
    )
    data = dp_hybrid()
    data["task_graphs"][1]["batch_shares"] = {"n0:0": 6, "n0:1": 6}  # type: ignore[index]
    assert "task_graphs.1.batch_shares: only a replicate TaskGraph has batch shares" in issues_of(data)
    data = dp_hybrid()
    data["nested_dp"] = 2
    assert "task_graphs.0.virtual_devices: has 1 VirtualDevices, nested_dp is 2" in issues_of(data)
    data = dp_hybrid()
    data["task_graphs"][0]["degree"] = 10**9  # type: ignore[index]
    assert any("task_graphs.0.degree" in s for s in issues_of(data))  # limits.py bound
    data = dp_hybrid()
    data["task_graphs"][0]["virtual_devices"] = [{"devices": ["n0:0\n", "n0:1"]}]  # type: ignore[index]
    assert any("control characters" in s for s in issues_of(data))


def test_nested_dp_replicas_and_pipeline_reuse_plan() -> None:
    # 2 stages x nested DP 2 with uneven replica batches: replica 0 (n0) 12 samples, replica 1 (n1) 4.
    p = HybridPlan(
        task_graphs=(
            TaskGraph(first_layer=0, last_layer=1, virtual_devices=(vd("n0:0"), vd("n1:0"))),
            TaskGraph(first_layer=1, last_layer=4, virtual_devices=(vd("n0:1"), vd("n1:1"))),
        ),
        nested_dp=2,
        global_batch=16,
        replica_batches=(12, 4),
        num_micro_batches=8,
        schedule="kfkb",
        k=2,
    )
    plan = p.to_plan()
    assert [s.devices for s in plan.stages] == [("n0:0", "n1:0"), ("n0:1", "n1:1")]
    assert plan.batch_shares == {"n0:0": 12, "n1:0": 4}
    assert [plan.replica_micro_batches(d) for d in (0, 1)] == [6, 2]
    assert plan.micro_batch_size == p.micro_batch_size == 2
    p.check(MODEL, CLUSTER)
    # a share that is no multiple of the micro-batch size is refused on the hybrid plan's field
    with pytest.raises(ValidationError) as e:
        HybridPlan.model_validate({**p.model_dump(), "replica_batches": (11, 5)})
    msgs = [str(i) for i in SpecError.from_pydantic(e.value).issues]
    assert any(
        m.startswith("task_graphs.0.batch_shares.n0:0: 11 is not a multiple of micro_batch_size 2")
        for m in msgs
    )
    # pipelined TaskGraphs cannot share devices
    bad = dp_hybrid()
    bad["num_micro_batches"] = 2
    assert any("pipelined TaskGraphs need their own devices" in s for s in issues_of(bad))


def test_cluster_checks_devices_types_and_layers() -> None:
    p = HybridPlan(
        task_graphs=(
            TaskGraph(
                first_layer=0,
                last_layer=3,
                degree=2,
                virtual_devices=(VirtualDevice(devices=("n0:0", "n9:0"), types=("T4", "T4")),),
            ),
        ),
        global_batch=4,
    )
    msgs = [str(i) for i in hybrid_issues(p, MODEL, CLUSTER)]
    assert "task_graphs.0.last_layer: is 3, the model has 4 layers" in msgs
    assert "task_graphs.0.virtual_devices.0.devices.1: unknown node 'n9'" in msgs
    gpu = CLUSTER.device_types[0].name
    assert f"task_graphs.0.virtual_devices.0.types.0: is 'T4', but n0:0 is a {gpu}" in msgs
    assert VirtualDevice.on(CLUSTER, ["n1:1", "n0:0"]).types == (gpu, gpu)
    assert VirtualDevice.on(CLUSTER, ["n1:1", "n0:0"]).ranks(CLUSTER) == (3, 0)


def test_json_round_trip() -> None:
    p = parse_as(HybridPlan, dp_hybrid({"n0:0": 9, "n0:1": 3}))
    text = p.model_dump_json()
    assert HybridPlan.model_validate(json.loads(text)) == p
    assert json.loads(text)["kind"] == "hybrid"


def test_split_shares_cut_the_dimension() -> None:
    tg = TaskGraph(first_layer=0, last_layer=1, primitive="split", degree=3, virtual_devices=(vd("a:0", "a:1", "a:2"),),
                   split_shares=(2, 1, 1))  # fmt: skip
    assert tg.split_sizes(10) == (5, 3, 2)
    assert TaskGraph(first_layer=0, last_layer=1, primitive="split", degree=3,
                     virtual_devices=(vd("a:0", "a:1", "a:2"),)).split_sizes(10) == (4, 3, 3)  # fmt: skip


def test_mapping_annotation_places_like_whale() -> None:
    # Whale's Example 2: replicate the features over every device, split the head over every device.
    ann = Annotation.from_mapping({"l3": Scope("split", 4)}, default=Scope("replicate"))
    p = plan_from_annotations(MODEL, CLUSTER, ann, global_batch=8)
    assert [(t.first_layer, t.last_layer, t.primitive, t.degree) for t in p.task_graphs] == [
        (0, 3, "replicate", 4),
        (3, 4, "split", 4),
    ]
    assert p.task_graphs[0].virtual_devices[0].devices == p.task_graphs[1].virtual_devices[0].devices
    assert p.nested_dp == 1
    # Example 1: two pipeline TaskGraphs of one device each on 4 devices: nested DP 4 / 2 = 2
    ann = Annotation.from_mapping(
        {"l0": Scope("replicate", 1), "l1": Scope("replicate", 1)}, Scope("replicate", 1)
    )
    p = plan_from_annotations(MODEL, CLUSTER, ann, global_batch=8, num_micro_batches=4)
    assert [(t.first_layer, t.last_layer) for t in p.task_graphs] == [(0, 1), (1, 2), (2, 4)]
    ann = Annotation.from_mapping({"l0": Scope("replicate", 1)}, Scope("replicate", 1))
    p = plan_from_annotations(MODEL, CLUSTER, ann, global_batch=8, num_micro_batches=4)
    assert p.nested_dp == 2
    assert [t.devices for t in p.task_graphs] == [("n0:0", "n1:0"), ("n0:1", "n1:1")]
    assert p.to_plan().batch_shares == {"n0:0": 4, "n1:0": 4}
    with pytest.raises(SpecError, match="ask for 8 devices"):
        plan_from_annotations(
            MODEL, CLUSTER, Annotation.from_mapping({"l0": Scope("split", 8)}), global_batch=8
        )


def test_traced_context_managers() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l0, self.l1, self.l2, self.l3 = (torch.nn.Linear(6, 6) for _ in range(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with replicate(2):
                x = self.l1(self.l0(x))
            with split(2):
                x = self.l3(self.l2(x))
            return x

    ann = trace_scopes(Net(), torch.zeros(1, 6))
    p = plan_from_annotations(MODEL, CLUSTER, ann, global_batch=8)
    assert [(t.first_layer, t.last_layer, t.primitive, t.degree) for t in p.task_graphs] == [
        (0, 2, "replicate", 2),
        (2, 4, "split", 2),
    ]
    assert p.nested_dp == 1  # 2 + 2 = 4 devices: disjoint
    assert p.task_graphs[1].virtual_devices[0].devices == ("n1:0", "n1:1")
    with pytest.raises(ValueError, match="device_count"), split(0):
        pass
