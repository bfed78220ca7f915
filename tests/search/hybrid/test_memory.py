"""Algorithm 1's inputs come from the one memory model (search.feasibility) and the compute model."""

from __future__ import annotations

import pytest

from search.feasibility import MemoryConfig, MemoryModel
from search.hybrid import device_slots, replicate_profile, split_profile
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    DeviceType,
    Layer,
    ModelSpec,
    Node,
    Strategy,
    Variable,
    VariableStrategy,
)


def _model() -> ModelSpec:
    layers = tuple(
        Layer(
            name=f"l{i}",
            kind="linear",
            fwd_flops=2e9,
            activation_bytes=1e6 * (i + 1),
            variables=(Variable(name=f"w{i}", shape=(1000, 1000)),),
            inputs=(f"l{i - 1}",) if i else (),
        )
        for i in range(3)
    )
    return ModelSpec(name="m", batch_size=8, layers=layers)


def _cluster() -> ClusterSpec:
    big = DeviceType(name="Big", fp32_tflops=15.7, fp16_tflops=125, memory_gb=32, memory_bw_gbs=900)
    small = DeviceType(name="Small", fp32_tflops=9.3, fp16_tflops=18.7, memory_gb=16, memory_bw_gbs=732)
    return ClusterSpec(
        name="c",
        device_types=(big, small),
        nodes=(
            Node(name="b", device="Big", gpus=2, nic_gbps=10),
            Node(name="s", device="Small", gpus=2, nic_gbps=10),
        ),
        intra_node_gbps=100,
    )


def test_replicate_memory_is_the_samplers_data_parallel_rule() -> None:
    model, cluster = _model(), _cluster()
    strategy = Strategy(
        variables=tuple(VariableStrategy(variable=f"w{i}", shards=(CollectiveSync(),)) for i in range(3))
    )
    for batch in (1, 8, 13):
        mem = MemoryModel(model, cluster, MemoryConfig(batch_size=batch))
        prof = replicate_profile(mem, 0, 3, 64)
        assert prof.memory(0, batch) == pytest.approx(mem.check(strategy).device_bytes)
    # hand-worked: 3 x 4e6 params + 3 x 4e6 grads + Adam 2 x 12e6 + 6e6 activations per sample
    prof = replicate_profile(MemoryModel(model, cluster), 0, 3, 64)
    assert prof.memory(0, 10) == pytest.approx(48e6 + 60e6)
    assert prof.flop_per_unit == pytest.approx(3 * 2e9 + 2e9 + 2 * 2 * 2e9)  # first layer: no dX


def test_split_shards_everything_but_the_bridge() -> None:
    mem = MemoryModel(_model(), _cluster())
    prof = split_profile(mem, 1, 3, batch=4, units=1024)
    whole = mem.stage_bytes(1, 3, 4, 0).total
    bridge = mem.boundary_bytes(1, 3) * 4
    assert prof.memory(0, 1024) == pytest.approx(whole + bridge)
    assert prof.memory(0, 256) == pytest.approx(whole / 4 + bridge)


def test_device_slots_read_capacity_and_speed() -> None:
    model, cluster = _model(), _cluster()
    mem = MemoryModel(model, cluster)
    peak = device_slots(model, cluster, ["b:0", "s:1"], mem, capacity="peak")
    assert [s.flops for s in peak] == [15.7e12, 9.3e12]
    assert [s.capacity for s in peak] == [pytest.approx(28.8e9), pytest.approx(14.4e9)]
    achieved = device_slots(model, cluster, ["b:0", "s:1"], mem, batch=8)
    assert 0 < achieved[1].flops < achieved[0].flops < 15.7e12
    with pytest.raises(ValueError, match="'b0' is not 'node:gpu_index'"):
        device_slots(model, cluster, ["b0"], mem)


def _amp_model(dtype: str = "float32") -> ModelSpec:
    """embedding -> linear -> add(linear, embedding) -> layernorm -> linear -> relu: autocast's dtypes
    float32, float16, float32 (promotion), float32, float16, float16 (follows its input)."""

    def lay(name: str, kind: str, inputs: tuple[str, ...], var: bool = True) -> Layer:
        return Layer(
            name=name,
            kind=kind,
            fwd_flops=1e6,
            activation_bytes=1000.0,
            variables=(Variable(name=f"{name}.w", shape=(10, 10), dtype=dtype),) if var else (),
            inputs=inputs,
        )

    return ModelSpec(
        name="amp",
        batch_size=4,
        layers=(
            lay("emb", "embedding", ()),
            lay("fc1", "linear", ("emb",)),
            lay("res", "add", ("fc1", "emb"), var=False),
            lay("ln", "layernorm", ("res",)),
            lay("fc2", "linear", ("ln",)),
            lay("act", "relu", ("fc2",), var=False),
        ),
    )


def test_autocast_activation_factor_follows_autocasts_dtype_rules() -> None:
    from search.hybrid import autocast_activation_factor

    m = _amp_model()
    # float32 4 bytes: emb, res, ln; float16 2 bytes: fc1, fc2, act -> (3 * 4 + 3 * 2) / (6 * 4)
    assert autocast_activation_factor(m) == pytest.approx(18 / 24)
    assert autocast_activation_factor(m, 4, 6) == pytest.approx(0.5)  # fc2, relu after it
    assert autocast_activation_factor(m, 2, 4) == pytest.approx(1.0)  # the float32 residual + norm
    # a model traced in float16 already stores 2-byte activations
    assert autocast_activation_factor(_amp_model("float16")) == 1.0
    # the planner applies it through MemoryConfig.activation_factor: activations scale, the rest not
    cluster = _cluster()
    full = MemoryModel(m, cluster).stage_bytes(0, 6, 4, 0)
    amp = MemoryModel(m, cluster, MemoryConfig(activation_factor=autocast_activation_factor(m))).stage_bytes(
        0, 6, 4, 0
    )
    assert amp.activations == pytest.approx(full.activations * 18 / 24)
    assert (amp.params, amp.grads, amp.optimizer) == (full.params, full.grads, full.optimizer)
