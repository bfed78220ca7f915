"""The vocabulary: every type round-trips through JSON, and every validation rule names its field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    DeviceType,
    Layer,
    ModelSpec,
    Node,
    Partition,
    Plan,
    PSSync,
    SpecError,
    Stage,
    Strategy,
    Variable,
    VariableStrategy,
    dump_json,
    parse_spec,
)
from simulator.spec.io import parse_as
from simulator.spec.measurement import Measurement


def small_model() -> ModelSpec:
    return ModelSpec(
        name="mlp",
        batch_size=4,
        layers=[
            Layer(
                name="emb",
                kind="embedding",
                fwd_flops=0,
                activation_bytes=64,
                variables=[Variable(name="emb.weight", shape=(100, 16), sparse=True, density=0.04)],
            ),
            Layer(
                name="fc1",
                kind="linear",
                fwd_flops=2 * 16 * 32,
                activation_bytes=128,
                inputs=("emb",),
                variables=[
                    Variable(name="fc1.weight", shape=(32, 16)),
                    Variable(name="fc1.bias", shape=(32,)),
                ],
            ),
            Layer(name="relu", kind="relu", fwd_flops=32, activation_bytes=128, inputs=("fc1",)),
            Layer(
                name="fc2",
                kind="linear",
                fwd_flops=2 * 32 * 4,
                activation_bytes=16,
                inputs=("relu", "emb"),
                variables=[Variable(name="fc2.weight", shape=(4, 32))],
            ),
        ],
    )


def small_cluster() -> ClusterSpec:
    t4 = DeviceType(name="T4", fp32_tflops=8.1, fp16_tflops=65, memory_gb=16, memory_bw_gbs=320)
    m60 = DeviceType(name="M60", fp32_tflops=4.8, fp16_tflops=4.8, memory_gb=8, memory_bw_gbs=160)
    return ClusterSpec(
        name="mixed",
        device_types=[t4, m60],
        nodes=[
            Node(name="a", device="T4", gpus=4, nic_gbps=50, price_per_hour=3.912),
            Node(name="b", device="M60", gpus=1, nic_gbps=10, latency_us=50),
        ],
        intra_node_gbps=64,
        single_flow_gbps=25,
    )


def full_strategy() -> Strategy:
    return Strategy(
        name="mixed",
        model="mlp",
        cluster="mixed",
        variables=[
            VariableStrategy(variable="emb.weight", shards=[PSSync(server="b")]),
            VariableStrategy(
                variable="fc1.weight",
                partition=Partition(axis=0, shards=2),
                shards=[
                    PSSync(server="a", local_replication=True, staleness=1),
                    CollectiveSync(group=1, compressor=Compressor(kind="fp16")),
                ],
            ),
            VariableStrategy(variable="fc1.bias", shards=[CollectiveSync(group=1)]),
            VariableStrategy(
                variable="fc2.weight",
                shards=[
                    CollectiveSync(
                        group=0, compressor=Compressor(kind="powersgd", rank=2), algorithm="hierarchical"
                    )
                ],
            ),
        ],
        plan=Plan(
            stages=[
                Stage(first_layer=0, last_layer=2, devices=("a:0", "a:1"), replicate=2),
                Stage(first_layer=2, last_layer=4, devices=("a:2", "a:3"), split=2),
            ],
            global_batch=16,
            batch_shares={"a:0": 10, "a:1": 6},
            micro_batch_size=2,
            num_micro_batches=8,
            schedule="kfkb",
            k=2,
        ),
    )


@pytest.mark.parametrize(
    "obj",
    [
        small_model(),
        small_cluster(),
        full_strategy(),
        full_strategy().plan,
        Variable(name="v", shape=(3, 4), dtype="float16"),
        Compressor(kind="powersgd", rank=4),
        Measurement(iteration_times=(0.1, 0.2, 0.15), compute_times=(0.05,) * 3, sync_wait_times=(0.01,) * 3),
    ],
    ids=lambda o: type(o).__name__,
)
def test_every_type_round_trips_through_json(obj: BaseModel) -> None:
    text = dump_json(obj)
    back = parse_as(type(obj), json.loads(text))
    assert back == obj
    assert dump_json(back) == text


def test_parse_spec_dispatches_on_kind() -> None:
    for spec in (small_model(), small_cluster(), full_strategy()):
        assert parse_spec(json.loads(dump_json(spec))) == spec


def test_variable_bytes_are_derived_and_checked() -> None:
    v = Variable(name="w", shape=(20, 10))
    assert v.bytes == 800 and v.numel == 200
    assert json.loads(dump_json(v))["bytes"] == 800
    assert Variable(name="e", shape=(100, 16), sparse=True, density=0.25).grad_bytes == 1600.0
    with pytest.raises(SpecError, match=r"^bytes: is 801 but shape x dtype gives 800$"):
        parse_as(Variable, {"name": "w", "shape": [20, 10], "bytes": 801})


def test_strategy_check_accepts_a_fitting_strategy() -> None:
    full_strategy().check(small_model(), small_cluster())


def test_bandwidth_between_nodes() -> None:
    c = small_cluster()
    assert c.link_gbps(0, 0) == 64  # intra-node
    assert c.link_gbps(0, 1) == 10  # the slower NIC
    assert c.link_gbps(1, 0) == 10
    capped = c.model_copy(update={"single_flow_gbps": 5.0})
    assert capped.link_gbps(0, 1) == 5
    assert c.num_gpus == 5 and c.devices[4] == (1, 0)
    assert c.link_bytes_per_s(0, 1) == 10e9 / 8


def test_shards_follow_the_partition() -> None:
    shards = list(full_strategy().shards(small_model()))
    assert [(s.variable, s.index, s.shape) for s in shards] == [
        ("emb.weight", 0, (100, 16)),
        ("fc1.weight", 0, (16, 16)),
        ("fc1.weight", 1, (16, 16)),
        ("fc1.bias", 0, (32,)),
        ("fc2.weight", 0, (4, 32)),
    ]
    assert shards[0].grad_bytes == pytest.approx(100 * 16 * 4 * 0.04)
    assert Partition(axis=0, shards=3).shard_shapes((10, 2)) == ((4, 2), (3, 2), (3, 2))


def _model_dict() -> dict[str, Any]:
    return json.loads(dump_json(small_model()))


def _cluster_dict() -> dict[str, Any]:
    return json.loads(dump_json(small_cluster()))


def _strategy_dict() -> dict[str, Any]:
    return json.loads(dump_json(full_strategy()))


def _errors(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return str(info.value)


def test_model_rules() -> None:
    m = _model_dict()
    m["layers"][1]["inputs"] = ["nope"]
    assert _errors(m) == "layers.1.inputs.0: unknown layer 'nope'"

    m = _model_dict()
    m["layers"][1]["inputs"] = ["fc2"]
    assert _errors(m) == "layers.1.inputs: cycle in the DAG: fc1 -> fc2 -> relu -> fc1"

    m = _model_dict()
    m["layers"][3]["name"] = "fc1"
    assert "layers.3.name: duplicate layer name 'fc1'" in _errors(m)

    m = _model_dict()
    m["layers"][3]["variables"][0]["name"] = "fc1.bias"
    assert _errors(m) == "layers.3.variables.0.name: duplicate variable name 'fc1.bias'"

    m = _model_dict()
    m["layers"][1]["variables"][0]["shape"] = [32, 0]
    assert _errors(m) == "layers.1.variables.0.shape.1: must be >= 1, got 0"

    m = _model_dict()
    m["layers"][2]["fwd_flops"] = -1
    assert _errors(m) == "layers.2.fwd_flops: Input should be greater than or equal to 0"

    m = _model_dict()
    m["layers"][0]["variables"][0]["density"] = 1.5
    assert _errors(m) == "layers.0.variables.0.density: Input should be less than or equal to 1"

    m = _model_dict()
    m["layers"][1]["variables"][1]["density"] = 0.5
    assert _errors(m) == "layers.1.variables.1.density: must be 1.0 for a dense variable"

    m = _model_dict()
    m["batch_size"] = 0
    assert _errors(m) == "batch_size: Input should be greater than or equal to 1"


def test_forward_order_must_be_topological() -> None:
    m = _model_dict()
    m["layers"][1]["inputs"] = ["relu"]
    m["layers"][2]["inputs"] = []
    assert _errors(m) == "layers.1.inputs.0: layer 'relu' comes later in forward order"


def test_cluster_rules() -> None:
    c = _cluster_dict()
    c["nodes"][1]["nic_gbps"] = 0
    assert _errors(c) == "nodes.1.nic_gbps: Input should be greater than or equal to 0.000001"

    c = _cluster_dict()
    c["nodes"][0]["nic_gbps"] = -25
    assert _errors(c) == "nodes.0.nic_gbps: Input should be greater than or equal to 0.000001"

    c = _cluster_dict()
    c["nodes"][1]["device"] = "H100"
    assert _errors(c) == "nodes.1.device: unknown device type 'H100'"

    c = _cluster_dict()
    c["nodes"][1]["name"] = "a"
    assert _errors(c) == "nodes.1.name: duplicate node name 'a'"

    c = _cluster_dict()
    for n in c["nodes"]:
        n["gpus"] = 0
    assert _errors(c) == "nodes: the cluster has no GPU"

    c = _cluster_dict()
    c["single_flow_gbps"] = 0
    assert _errors(c) == "single_flow_gbps: Input should be greater than or equal to 0.000001"


def _check_errors(s: dict[str, Any]) -> str:
    strategy = parse_as(Strategy, s)
    with pytest.raises(SpecError) as info:
        strategy.check(small_model(), small_cluster())
    return str(info.value)


def test_strategy_rules_against_model_and_cluster() -> None:
    s = _strategy_dict()
    s["variables"][0]["variable"] = "ghost"
    assert _check_errors(s) == (
        "variables.0.variable: unknown variable 'ghost'; variables: no sub-strategy for variable 'emb.weight'"
    )

    s = _strategy_dict()
    s["variables"][0]["shards"][0]["server"] = "z"
    assert _check_errors(s) == "variables.0.shards.0.server: unknown node 'z'"

    s = _strategy_dict()
    s["variables"][2]["partition"] = {"axis": 0, "shards": 33}
    s["variables"][2]["shards"] = [{"kind": "collective"}] * 33
    assert _check_errors(s) == "variables.2.partition.shards: 33 shards > dimension 32 of axis 0"

    s = _strategy_dict()
    s["variables"][2]["partition"] = {"axis": 1, "shards": 1}
    assert _check_errors(s) == "variables.2.partition.axis: 1 >= rank 1 of fc1.bias"

    s = _strategy_dict()
    s["variables"][0]["partition"] = {"axis": 1, "shards": 2}
    s["variables"][0]["shards"] = [{"kind": "ps", "server": "a"}] * 2
    assert _check_errors(s) == "variables.0.partition.axis: a sparse variable can only be split on axis 0"

    s = _strategy_dict()
    s["variables"][2]["shards"][0]["compressor"] = {"kind": "powersgd", "rank": 2}
    assert _check_errors(s) == "variables.2.shards.0.compressor: powersgd needs a matrix (rank >= 2)"

    s = _strategy_dict()
    s["variables"] = s["variables"][1:]
    assert _check_errors(s) == "variables: no sub-strategy for variable 'emb.weight'"

    s = _strategy_dict()
    s["model"] = "other"
    assert _check_errors(s) == "model: strategy is for model 'other', not 'mlp'"


def test_strategy_rules_on_its_own() -> None:
    s = _strategy_dict()
    s["variables"][1]["partition"]["shards"] = 3
    assert _errors(s) == "variables.1.shards: has 2 synchronisers but partition.shards is 3"

    s = _strategy_dict()
    s["variables"][3]["shards"][0]["compressor"] = {"kind": "powersgd"}
    assert _errors(s) == "variables.3.shards.0.compressor.rank: is required for powersgd"

    s = _strategy_dict()
    s["variables"][2]["shards"][0]["compressor"] = {"kind": "fp16", "rank": 3}
    assert _errors(s) == "variables.2.shards.0.compressor.rank: must be unset for compressor 'fp16'"

    s = _strategy_dict()
    s["variables"][2]["variable"] = "fc1.weight"
    assert _errors(s) == "variables.2.variable: duplicate variable 'fc1.weight'"

    s = _strategy_dict()
    s["variables"][0]["shards"][0]["kind"] = "gossip"
    assert "variables.0.shards.0" in _errors(s)

    s = _strategy_dict()
    s["variables"][0]["shards"][0]["staleness"] = -1
    assert _errors(s) == "variables.0.shards.0.staleness: Input should be greater than or equal to 0"


def test_plan_rules() -> None:
    s = _strategy_dict()
    s["plan"]["batch_shares"] = {"a:0": 10, "a:1": 5}
    assert _errors(s) == "plan.batch_shares: sum to 15 but global_batch is 16"

    s = _strategy_dict()
    s["plan"]["k"] = 3
    assert _errors(s) == "plan.k: must divide num_micro_batches 8"

    s = _strategy_dict()
    s["plan"]["stages"][1]["first_layer"] = 3
    assert _errors(s) == "plan.stages.1.first_layer: is 3, expected 2"

    s = _strategy_dict()
    s["plan"]["stages"][0]["replicate"] = 3
    assert _errors(s) == "plan.stages.0.devices: has 2 devices but replicate x split = 3"

    s = _strategy_dict()
    s["plan"]["stages"][1]["devices"] = ["a:1", "a:3"]
    assert _errors(s) == "plan.stages.1.devices.0: a:1 is already in stage 0"

    s = _strategy_dict()
    s["plan"]["stages"][1]["devices"] = ["a:2", "b:3"]
    assert _check_errors(s) == "plan.stages.1.devices.1: node 'b' has 1 GPUs, no index 3"

    s = _strategy_dict()
    s["plan"]["stages"][1]["last_layer"] = 3
    assert _check_errors(s) == "plan.stages.1.last_layer: is 3, the model has 4 layers"


def test_unknown_kind_and_not_an_object() -> None:
    assert (
        _errors({"kind": "pipeline"})
        == "kind: unknown kind 'pipeline'; expected one of ['cluster', 'model', 'resource_plan', 'strategy']"
    )
    with pytest.raises(SpecError, match="must be a JSON object"):
        parse_spec([1, 2])


def test_measurement_statistics() -> None:
    m = Measurement(iteration_times=(0.3, 0.1, 0.2, 0.4, 0.5))
    assert m.ok and m.median == 0.3
    failed = Measurement(failure="timeout after 60 s")
    assert not failed.ok
    with pytest.raises(ValueError, match="timeout"):
        _ = failed.median
