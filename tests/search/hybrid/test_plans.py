"""Hardware-aware HybridPlans against their baselines under the one memory model and the cost model."""

from __future__ import annotations

import pytest

from search.feasibility import MemoryConfig, MemoryModel
from search.hybrid.plans import (
    balanced_data_parallel,
    balanced_pipeline,
    even_data_parallel,
    even_pipeline,
    memory_reasons,
)
from simulator.hybrid import predict
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Variable


def model(n: int = 8, act: float = 2e8) -> ModelSpec:
    return ModelSpec(
        name="toy",
        batch_size=8,
        layers=tuple(
            Layer(
                name=f"l{i}",
                kind="linear",
                fwd_flops=2e10,
                activation_bytes=act,
                variables=(Variable(name=f"w{i}", shape=(4096, 4096)),),
                inputs=(f"l{i - 1}",) if i else (),
            )
            for i in range(n)
        ),
    )


def cluster() -> ClusterSpec:
    # a fast GPU with little memory beside a slow one with a lot (A100-40GB-like vs T4-like ratios)
    fast = DeviceType(name="Fast", fp32_tflops=20, fp16_tflops=20, memory_gb=16, memory_bw_gbs=2000)
    slow = DeviceType(name="Slow", fp32_tflops=8, fp16_tflops=8, memory_gb=32, memory_bw_gbs=900)
    return ClusterSpec(
        name="fs",
        device_types=(fast, slow),
        nodes=(
            Node(name="f", device="Fast", gpus=2, nic_gbps=100),
            Node(name="s", device="Slow", gpus=2, nic_gbps=100),
        ),
        intra_node_gbps=300,
    )


def test_only_the_balanced_plan_fits_where_even_and_proportional_overflow() -> None:
    m, c = model(), cluster()
    mem = MemoryModel(m, c, MemoryConfig(optimizer="sgd"))
    # per device: 8 x 67 MB params + grads = 1.07 GB, 1.6 GB activations per sample; Fast holds
    # (14.4 - 1.07) / 1.6 = 8 samples, Slow 17
    plan, bal = balanced_data_parallel(m, c, mem, 40)
    assert memory_reasons(plan, mem) == []
    assert bal.initial[0] > 8 and bal.shares[0] <= 8 and bal.shifts
    even = even_data_parallel(m, c, 40)
    assert [r.split(":")[0] + ":" + r.split(":")[1] for r in memory_reasons(even, mem)] == ["f:0", "f:1"]
    proportional = plan.model_copy(
        update={
            "task_graphs": (
                plan.task_graphs[0].model_copy(
                    update={"batch_shares": dict(zip(plan.devices, bal.initial, strict=True))}
                ),
            )
        }
    )
    assert memory_reasons(proportional, mem)


def test_balanced_data_parallel_is_faster_when_memory_is_ample() -> None:
    m, c = model(act=1e7), cluster()
    mem = MemoryModel(m, c)
    plan, bal = balanced_data_parallel(m, c, mem, 56)
    assert not bal.shifts and bal.shares[0] > bal.shares[2]
    assert predict(m, c, plan).seconds < predict(m, c, even_data_parallel(m, c, 56)).seconds


def test_balanced_pipeline_puts_the_first_stage_on_the_larger_memory_and_is_faster() -> None:
    m, c = model(16, act=1e7), cluster()
    mem = MemoryModel(m, c)
    devs = ["f:0", "f:1", "s:0", "s:1"]
    hw = balanced_pipeline(m, c, mem, devs, 4, 32, 2)
    base = even_pipeline(m, c, mem, devs, 4, 32, 2)
    assert hw.plan.task_graphs[0].devices[0].startswith("s")
    assert base.plan.task_graphs[0].devices[0] == "f:0"
    assert memory_reasons(hw.plan, mem) == []
    assert predict(m, c, hw.plan).seconds < predict(m, c, base.plan).seconds
    with pytest.raises(ValueError, match="global_batch: 30 is not a multiple"):
        balanced_pipeline(m, c, mem, devs, 2, 30, 4)
