"""Hybrid execution equals single-process SGD: replicate with uneven shares, split(2), split(4), and
replicate -> split with bridge layers (real compute, float64, gloo on loopback, one process per GPU).

Every rank's gradients (after the data-parallel all-reduce) are reassembled from their shards and
compared with ``runtime.hybrid.reference`` step by step, and so are the parameters after the last
SGD step. A missing share weight, a wrong shard offset, a bridge that drops or duplicates rows, or a
missing f/g collective moves the gradients far beyond the tolerance.
"""

from __future__ import annotations

import pytest
import torch

from runtime.executor import ExecutorConfig, LocalLauncher
from runtime.executor.reference import GPU, linear
from runtime.hybrid import HybridConfig, HybridRun, run_hybrid
from runtime.hybrid.reference import reference_grads
from simulator.hybrid import grad_buckets
from simulator.spec import ClusterSpec, HybridPlan, Layer, ModelSpec, Node, TaskGraph, Variable, VirtualDevice

TOL = dict(rtol=1e-9, atol=1e-12)
STEPS = 2
LR = 0.05
HEADS = 4
CLUSTER = ClusterSpec(
    name="1x4",
    device_types=(GPU,),
    nodes=(Node(name="n0", device=GPU.name, gpus=4, nic_gbps=10.0),),
    intra_node_gbps=100.0,
)


def embedding(name: str, rows: int, dim: int) -> Layer:
    return Layer(name=name, kind="embedding", fwd_flops=0.0, activation_bytes=4.0 * dim,
                 variables=(Variable(name=f"{name}.w", shape=(rows, dim)),))  # fmt: skip


def attention(name: str, d: int) -> Layer:
    return Layer(name=name, kind="attention", fwd_flops=8.0 * d * d, activation_bytes=4.0 * d,
                 variables=tuple(Variable(name=f"{name}.{w}", shape=(d, d)) for w in "qkvo"))  # fmt: skip


def norm(name: str, d: int) -> Layer:
    return Layer(name=name, kind="norm", fwd_flops=2.0 * d, activation_bytes=4.0 * d,
                 variables=(Variable(name=f"{name}.g", shape=(d,)),))  # fmt: skip


# embedding -> attention -> norm -> linear -> linear -> linear (widths 8 -> 12 -> 8 -> 6)
MODEL = ModelSpec(
    name="tiny-transformer",
    batch_size=4,
    layers=(embedding("emb", 12, 8), attention("attn", 8), norm("norm", 8), linear("fc1", 8, 12),
            linear("fc2", 12, 8), linear("fc3", 8, 6)),
)  # fmt: skip


def devs(*idx: int) -> VirtualDevice:
    return VirtualDevice(devices=tuple(f"n0:{i}" for i in idx))


# A bucket cap of a few hundred bytes cuts the tiny model's gradients into several DP buckets, so
# the reference checks below run the overlapped, bucketed all-reduce with more than one bucket.
BUCKET_BYTES = 600.0


def run(plan: HybridPlan, overlap: bool = True, bucket_bytes: float = BUCKET_BYTES) -> HybridRun:
    ex = ExecutorConfig(compute="real", warmup=0, iterations=STEPS, lr=LR, seed=5, timeout_s=120)
    cfg = HybridConfig(ex, dtype="float64", attention_heads=HEADS, record_grads=True,
                       overlap_sync=overlap, bucket_bytes=bucket_bytes)  # fmt: skip
    result = run_hybrid(MODEL, CLUSTER, plan, LocalLauncher(), cfg)
    assert result.status == "ok", result.reason
    return result


def assemble(result: HybridRun, step: int | None) -> dict[str, torch.Tensor]:
    """Whole tensors from every rank's shards (step None: the final parameters)."""
    full: dict[str, torch.Tensor] = {}
    ref_shapes = {v.name: v.shape for v in MODEL.variables}
    for rank, slices in result.slices.items():
        values = result.params[rank] if step is None else result.grads[rank][step]
        for name, s in slices.items():
            value = values[name]
            if s is None:
                if name in full:  # a copy held by another device must be identical
                    assert torch.equal(full[name], value), name
                full[name] = value
                continue
            axis, lo, hi = s
            whole = full.setdefault(name, torch.full(ref_shapes[name], float("nan"), dtype=value.dtype))
            whole.narrow(axis, lo, hi - lo).copy_(value)
    return full


def check(plan: HybridPlan) -> None:
    result = run(plan)
    grads, params = reference_grads(MODEL, plan.global_batch, STEPS, LR, 5, HEADS, torch.float64)
    for step in range(STEPS):
        got = assemble(result, step)
        assert set(got) == set(grads[step])
        for name, g in grads[step].items():
            assert torch.allclose(got[name], g, **TOL), (step, name, (got[name] - g).abs().max())
    final = assemble(result, None)
    for name, p in params.items():
        assert torch.allclose(final[name], p, **TOL), name


def test_replicate_uneven_shares() -> None:
    tg = TaskGraph(first_layer=0, last_layer=6, degree=3, virtual_devices=(devs(0, 1, 2),),
                   batch_shares={"n0:0": 7, "n0:1": 2, "n0:2": 1})  # fmt: skip
    check(HybridPlan(task_graphs=(tg,), global_batch=10))


def test_overlapped_buckets_reduce_the_same_gradients_as_one_fused_all_reduce() -> None:
    """Bucketed all-reduces started during backward give the fused call's gradients.

    Two ranks: every element is a + b either way, so bit-identical. Three ranks: the same sums,
    possibly added in another order inside gloo's ring (chunks differ with the buffer), so equal to
    float64 rounding (and step 2 starts from parameters that differ by that rounding), far inside
    the reference tolerance. Several buckets (cap 600 bytes: 3 of them here) so the order and the
    per-bucket offsets matter.
    """
    assert len(grad_buckets(MODEL, 0, 6, BUCKET_BYTES)) >= 3
    for shares, exact in (({"n0:0": 5, "n0:1": 2}, True), ({"n0:0": 7, "n0:1": 2, "n0:2": 1}, False)):
        tg = TaskGraph(first_layer=0, last_layer=6, degree=len(shares),
                       virtual_devices=(devs(*range(len(shares))),), batch_shares=shares)  # fmt: skip
        plan = HybridPlan(task_graphs=(tg,), global_batch=sum(shares.values()))
        fused, bucketed = run(plan, overlap=False), run(plan, overlap=True)
        for rank in fused.grads:
            for step in range(STEPS):
                for name, g in fused.grads[rank][step].items():
                    b = bucketed.grads[rank][step][name]
                    if exact:
                        assert torch.equal(b, g), (rank, step, name)
                    else:
                        err = (b - g).abs().max()
                        assert torch.allclose(b, g, rtol=1e-12, atol=1e-15), (rank, step, name, err)


def test_split_2() -> None:
    tg = TaskGraph(first_layer=0, last_layer=6, primitive="split", degree=2, virtual_devices=(devs(0, 1),))
    check(HybridPlan(task_graphs=(tg,), global_batch=5))


def test_split_4_uneven_shards() -> None:
    tg = TaskGraph(first_layer=0, last_layer=6, primitive="split", degree=4, virtual_devices=(devs(0, 1, 2, 3),),
                   split_shares=(2, 1, 1, 1))  # fmt: skip
    check(HybridPlan(task_graphs=(tg,), global_batch=3))


@pytest.mark.slow  # the uneven split(4) above covers split(4) in the default run
def test_split_4_even() -> None:
    tg = TaskGraph(
        first_layer=0, last_layer=6, primitive="split", degree=4, virtual_devices=(devs(0, 1, 2, 3),)
    )
    check(HybridPlan(task_graphs=(tg,), global_batch=4))


def test_replicate_then_split_with_bridges() -> None:
    # Whale's Example 2 shape: features replicated (uneven shares), head split over the same GPUs
    # plus one more, so the bridge both keeps rows local and moves them between devices.
    features = TaskGraph(first_layer=0, last_layer=3, degree=3, virtual_devices=(devs(0, 1, 2),),
                         batch_shares={"n0:0": 1, "n0:1": 4, "n0:2": 1})  # fmt: skip
    head = TaskGraph(first_layer=3, last_layer=6, primitive="split", degree=2, virtual_devices=(devs(1, 3),))
    check(HybridPlan(task_graphs=(features, head), global_batch=6))


@pytest.mark.slow
def test_nested_dp_over_split_then_replicate() -> None:
    # split(2) -> replicate(1) inside nested DP 2 with uneven replica batches
    head = TaskGraph(
        first_layer=0, last_layer=3, primitive="split", degree=2, virtual_devices=(devs(0, 1), devs(2, 3))
    )
    tail = TaskGraph(first_layer=3, last_layer=6, virtual_devices=(devs(1), devs(3)))
    check(HybridPlan(task_graphs=(head, tail), nested_dp=2, global_batch=7, replica_batches=(5, 2)))
