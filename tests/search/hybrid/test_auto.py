"""Automatic partition into TaskGraphs: the fastest candidate that fits, with every reason kept."""

from __future__ import annotations

import math

import pytest

from search.feasibility import MemoryConfig, MemoryModel
from search.hybrid.auto import auto_partition, micro_batches_for
from search.hybrid.plans import memory_reasons
from simulator.hybrid import predict
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Variable


def model(width: int) -> ModelSpec:
    return ModelSpec(
        name="toy",
        batch_size=8,
        layers=tuple(
            Layer(
                name=f"l{i}",
                kind="linear",
                fwd_flops=2e10,
                activation_bytes=1e7,
                variables=(Variable(name=f"w{i}", shape=(width, width)),),
                inputs=(f"l{i - 1}",) if i else (),
            )
            for i in range(8)
        ),
    )


def cluster(gb: float) -> ClusterSpec:
    fast = DeviceType(name="Fast", fp32_tflops=16, fp16_tflops=16, memory_gb=2 * gb, memory_bw_gbs=900)
    slow = DeviceType(name="Slow", fp32_tflops=9, fp16_tflops=9, memory_gb=gb, memory_bw_gbs=700)
    return ClusterSpec(
        name="fs",
        device_types=(fast, slow),
        nodes=(
            Node(name="f", device="Fast", gpus=2, nic_gbps=50),
            Node(name="s", device="Slow", gpus=2, nic_gbps=50),
        ),
        intra_node_gbps=100,
    )


def test_micro_batch_count() -> None:
    assert micro_batches_for(16, 4, 2) == 8
    assert micro_batches_for(12, 4, 2) == 6  # 8 does not divide 12: 6 is the closest divisor >= 4
    assert micro_batches_for(3, 4, 2) is None


def test_small_model_stays_data_parallel_and_the_winner_is_the_fastest_that_fits() -> None:
    m, c = model(256), cluster(16)
    mem = MemoryModel(m, c)
    auto = auto_partition(m, c, mem, 32)
    assert auto.plan.num_micro_batches == 1 and len(auto.plan.task_graphs) == 1
    assert [x.num_task_graphs for x in auto.candidates] == [1, 2, 4]
    assert auto.seconds == min(x.seconds for x in auto.candidates)
    assert auto.seconds == pytest.approx(predict(m, c, auto.plan).seconds)


def test_a_model_too_large_for_a_replica_is_pipelined() -> None:
    # 8 x 16384² floats = 8.6 GB of parameters (+ grads, no optimizer state): no replica fits 8 GB
    m, c = model(16384), cluster(8)
    mem = MemoryModel(m, c, MemoryConfig(optimizer="sgd"))
    auto = auto_partition(m, c, mem, 32)
    dp = auto.candidates[0]
    assert dp.num_task_graphs == 1 and math.isinf(dp.seconds) and "no load" in dp.reason
    assert len(auto.plan.task_graphs) > 1 and memory_reasons(auto.plan, mem) == []
    # earlier stages on the larger (Fast, 16 GB) devices
    assert auto.plan.task_graphs[0].devices[0].startswith("f")


def test_nothing_fits_names_every_candidate() -> None:
    m, c = model(16384), cluster(0.5)
    with pytest.raises(ValueError, match=r"global_batch: no partition .* 1 TaskGraphs: .* 2 TaskGraphs: "):
        auto_partition(m, c, MemoryModel(m, c), 32)
