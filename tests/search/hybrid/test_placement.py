"""Inter-TaskGraph balancing: memory-ordered stages, speed-balanced cuts against brute force."""

from __future__ import annotations

import itertools

import pytest

from search.feasibility import MemoryConfig, MemoryModel
from search.hybrid import (
    InfeasiblePartition,
    balanced_partition,
    evaluate_partition,
    even_partition,
    stage_slots,
)
from search.pipeline import plan_memory
from simulator.analytical.compute import OpEfficiency
from simulator.analytical.params import CostParams
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Plan, Stage, Variable

# compute-bound on every device: launch overhead 0, huge bandwidth, gemm efficiency 1
PARAMS = CostParams(op_efficiency=OpEfficiency(gemm=1.0))


def chain(n: int = 9, flops: list[float] | None = None, act: float = 1e6) -> ModelSpec:
    flops = flops or [1e12] * n
    layers = []
    for i, f in enumerate(flops):
        layers.append(
            Layer(
                name=f"l{i}",
                kind="linear",
                fwd_flops=f,
                activation_bytes=act,
                fwd_bytes=0.0,
                fwd_kernels=0,
                variables=(Variable(name=f"w{i}", shape=(1000, 1000)),),
                inputs=(f"l{i - 1}",) if i else (),
            )
        )
    return ModelSpec(name="chain", batch_size=1, layers=tuple(layers))


def gpu(name: str, tflops: float, gb: float) -> DeviceType:
    return DeviceType(
        name=name,
        fp32_tflops=tflops,
        fp16_tflops=tflops,
        memory_gb=gb,
        memory_bw_gbs=1e6,
        launch_overhead_us=0,
    )


def cluster(*types: tuple[str, float, float, int]) -> ClusterSpec:
    dts = tuple(gpu(n, t, g) for n, t, g, _ in types)
    nodes = tuple(Node(name=n.lower(), device=n, gpus=k, nic_gbps=10) for n, _, _, k in types)
    return ClusterSpec(name="het", device_types=dts, nodes=nodes, intra_node_gbps=100)


def test_earlier_stages_go_to_larger_memory() -> None:
    c = cluster(("Small", 20, 16, 2), ("Big", 10, 32, 2))
    mem = MemoryModel(chain(), c)
    devs = ["small:0", "small:1", "big:0", "big:1"]
    slots = stage_slots(c, mem, devs, 4)
    assert [s.devices for s in slots] == [("big:0",), ("big:1",), ("small:0",), ("small:1",)]
    seq = stage_slots(c, mem, devs, 2, order="sequential")  # nested DP 2, Whale's default order
    assert [s.devices for s in seq] == [("small:0", "big:0"), ("small:1", "big:1")]
    assert seq[0].device.name == "Big" and seq[0].capacity == pytest.approx(16e9 * 0.9)
    with pytest.raises(ValueError, match="num_stages: must divide the 4 devices"):
        stage_slots(c, mem, devs, 3)


def test_stage_times_balance_by_device_speed() -> None:
    # nine equal layers of 1 TFLOP forward; a layer takes 1.5 s on Fast (2 TFLOPS: 0.5 fwd + 1.0 bwd)
    # and 3 s on Slow; the first layer has no input gradient (1.0 s / 2 s). The balanced cut gives
    # Fast six layers (1 + 5 x 1.5 = 8.5 s) and Slow three (9 s).
    c = cluster(("Fast", 2, 32, 1), ("Slow", 1, 32, 1))
    mem = MemoryModel(chain(), c)
    slots = stage_slots(c, mem, ["fast:0", "slow:0"], 2)
    part = balanced_partition(chain(), mem, slots, 1, 4, params=PARAMS)
    assert part.ranges == ((0, 6), (6, 9))
    assert part.seconds == pytest.approx((8.5, 9.0))
    # the homogeneous cut (timed on Fast: 7.0 | 6.0) leaves Slow four layers: 12 s
    even = even_partition(chain(), mem, slots, 1, 4, params=PARAMS)
    assert even.ranges == ((0, 5), (5, 9))
    assert even.seconds == pytest.approx((7.0, 12.0))


def test_memory_bound_moves_layers_off_a_small_device() -> None:
    # 1F1B with 2 stages stashes 2 micro-batches on stage 0, 1 on stage 1: activations 1 GB/sample
    model = chain(act=1e9)
    c = cluster(("Fast", 4, 8, 1), ("Slow", 1, 64, 1))
    mem = MemoryModel(model, c, MemoryConfig(optimizer="sgd"))
    slots = stage_slots(c, mem, ["fast:0", "slow:0"], 2, order="sequential")
    free = balanced_partition(model, mem, slots, 1, 4, params=PARAMS, memory_bound=False)
    assert not free.fits
    part = balanced_partition(model, mem, slots, 1, 4, params=PARAMS)
    assert part.fits and part.ranges[0][1] < free.ranges[0][1]


def brute_force(model: ModelSpec, mem: MemoryModel, slots: list, mb: int, n: int) -> float:
    L, P = len(model.layers), len(slots)
    best = float("inf")
    for cuts in itertools.combinations(range(1, L), P - 1):
        b = [0, *cuts, L]
        part = evaluate_partition(model, mem, slots, [(b[i], b[i + 1]) for i in range(P)], mb, n, 1, PARAMS)
        if part.fits:
            best = min(best, part.bottleneck)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_dynamic_programme_matches_brute_force(seed: int) -> None:
    import random

    rng = random.Random(seed)
    model = chain(8, [rng.uniform(0.2, 3) * 1e12 for _ in range(8)], act=rng.uniform(0.1, 1.5) * 1e9)
    c = cluster(("A", 3, 12, 1), ("B", 2, 24, 1), ("C", 1, 16, 1))
    mem = MemoryModel(model, c, MemoryConfig(optimizer="sgd"))
    slots = stage_slots(c, mem, ["a:0", "b:0", "c:0"], 3, order="sequential")
    want = brute_force(model, mem, slots, 1, 6)
    if want == float("inf"):
        with pytest.raises(InfeasiblePartition, match="stages: no cut of 8 layers into 3 stages"):
            balanced_partition(model, mem, slots, 1, 6, params=PARAMS)
    else:
        got = balanced_partition(model, mem, slots, 1, 6, params=PARAMS)
        assert got.fits and got.bottleneck == pytest.approx(want)


def test_stage_bytes_are_the_pipeline_candidates_rule() -> None:
    model = chain(act=3e7)
    c = cluster(("Fast", 2, 32, 2), ("Slow", 1, 16, 2))
    mem = MemoryModel(model, c)
    slots = stage_slots(c, mem, ["slow:0", "slow:1", "fast:0", "fast:1"], 4)
    part = balanced_partition(model, mem, slots, 2, 8, params=PARAMS)
    plan = Plan(
        stages=tuple(
            Stage(first_layer=a, last_layer=b, devices=s.devices)
            for (a, b), s in zip(part.ranges, slots, strict=True)
        ),
        global_batch=16,
        batch_shares={slots[0].devices[0]: 16},
        micro_batch_size=2,
        num_micro_batches=8,
    )
    assert [v.memory.total for v in plan_memory(plan, mem)] == pytest.approx(list(part.bytes))
