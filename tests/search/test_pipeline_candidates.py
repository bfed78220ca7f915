"""(k, b) candidates on the memory-limit curve: a hand-worked curve and the curve's defining properties."""

from __future__ import annotations

import pytest

from search.feasibility import MemoryConfig, MemoryModel
from search.pipeline import memory_curve, plan_memory, plan_memory_reasons, with_kb
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Plan, Stage, Variable

MB = 1e6


def model() -> ModelSpec:
    # 10 MB of activations per sample per layer; parameters 4 x 4 floats (negligible, 128 B per layer)
    layers = tuple(
        Layer(
            name=f"l{i}",
            kind="linear",
            fwd_flops=1e9,
            activation_bytes=10 * MB,
            variables=(Variable(name=f"l{i}.w", shape=(4, 4)), Variable(name=f"l{i}.b", shape=(4,))),
        )
        for i in range(4)
    )
    return ModelSpec(name="act-heavy", batch_size=32, layers=layers)


def cluster(memory_gb: float) -> ClusterSpec:
    gpu = DeviceType(name="g", fp32_tflops=10.0, fp16_tflops=20.0, memory_gb=memory_gb, memory_bw_gbs=900.0)
    return ClusterSpec(
        name="c",
        device_types=(gpu,),
        nodes=(Node(name="n0", device="g", gpus=2, nic_gbps=10.0),),
        intra_node_gbps=100.0,
    )


def template(batch: int = 32) -> Plan:
    return Plan(
        stages=(
            Stage(first_layer=0, last_layer=2, devices=("n0:0",)),
            Stage(first_layer=2, last_layer=4, devices=("n0:1",)),
        ),
        global_batch=batch,
        batch_shares={"n0:0": batch},
        micro_batch_size=batch,
        num_micro_batches=1,
    )


def mem(memory_gb: float) -> MemoryModel:
    return MemoryModel(model(), cluster(memory_gb), MemoryConfig(optimizer="sgd", device_usable=0.9))


def test_stage_bytes_hand_worked() -> None:
    # stage 0 of a 2-stage 1F1B plan with b = 8: stashes 2 micro-batches = 16 samples x 20 MB,
    # buffers 2 micro-batches (the gradient being consumed, the next one posted) x 8 samples x
    # (10 MB out, no input); params 2 x 80 B, grads the same
    v = plan_memory(with_kb(template(), 1, 8), mem(1.0))
    assert v[0].memory.activations == pytest.approx(16 * 20 * MB)
    assert v[0].memory.buffers == pytest.approx(16 * 10 * MB)
    assert v[0].memory.params == v[0].memory.grads == 160.0
    assert v[0].memory.optimizer == 0.0
    # stage 1 stashes 1 micro-batch; its buffers (3 micro-batches on the input side: the activation
    # being consumed, the next one posted, an input gradient in flight) are costed at its input
    # and output activation
    assert v[1].memory.activations == pytest.approx(8 * 20 * MB)
    assert v[1].memory.buffers == pytest.approx(24 * 20 * MB)
    assert v[0].capacity == pytest.approx(0.9e9)


def test_memory_curve_hand_worked() -> None:
    # 900 MB usable. Stage 0 needs min(n, 2k)·b·20 + min(n, 2k)·b·10 MB, stage 1 min(n, k)·b·20 +
    # min(n, 3k)·b·20 MB: k=1: b=8 (stage 0 480, stage 1 640; b=16 needs 960 on stage 1); k=2: b=4;
    # k=4: b=2; k=8: b=1; k=16 needs 960 MB on stage 0 even at b=1; k=3, 5, 6, 7 divide no n = 32/b.
    curve = memory_curve(template(), mem(1.0))
    assert [(c.k, c.micro_batch_size) for c in curve] == [(1, 8), (2, 4), (4, 2), (8, 1)]
    assert [c.plan.schedule for c in curve] == ["1f1b", "kfkb", "kfkb", "kfkb"]
    assert all(c.peak_fraction <= 1.0 for c in curve)


@pytest.mark.parametrize("memory_gb", [0.7, 1.0, 1.3, 2.0, 5.0, 100.0])
def test_curve_points_are_maximal_fitting_and_undominated(memory_gb: float) -> None:
    m = mem(memory_gb)
    curve = memory_curve(template(), m)
    sizes = [b for b in range(32, 0, -1) if 32 % b == 0]
    best: dict[int, int] = {}
    for k in range(1, 33):
        for b in sizes:
            n = 32 // b
            if n >= k and n % k == 0 and not plan_memory_reasons(with_kb(template(), k, b), m):
                best[k] = b
                break
    got = {(c.k, c.micro_batch_size) for c in curve}
    for k, b in best.items():
        dominated = any(k2 >= k and b2 >= b and (k2, b2) != (k, b) for k2, b2 in best.items())
        assert ((k, b) in got) == (not dominated), (k, b)
    assert got <= set(best.items())


def test_gpipe_point_and_reasons() -> None:
    # with ample memory every k has b = 32 / k (n = k): k = n is GPipe
    curve = memory_curve(template(), mem(100.0))
    assert (32, 1) in {(c.k, c.micro_batch_size) for c in curve}
    assert curve[-1].plan.schedule == "gpipe"
    reasons = plan_memory_reasons(with_kb(template(), 32, 1), mem(1.0))
    assert reasons and reasons[0].startswith("plan.stages.0:") and "stashed activations 0.640" in reasons[0]


def test_gpipe_buffers_one_batch_not_three_groups() -> None:
    """GPipe (k = n) can hold at most the n micro-batches of each direction, never 3 groups of k = n."""
    for b in (1, 4):
        v = plan_memory(with_kb(template(), 32 // b, b), mem(100.0))
        assert v[0].memory.buffers == pytest.approx(32 * 10 * MB)  # n·b samples x its output
        assert v[1].memory.buffers == pytest.approx(32 * 20 * MB)  # n·b samples x input + output


def test_hybrid_partition_applies_the_same_rule() -> None:
    from search.hybrid import placement
    from search.pipeline import candidates

    assert placement.schedule_samples is candidates.schedule_samples
    P, n, k, b = 2, 8, 2, 4
    v = plan_memory(with_kb(template(), k, b), mem(1.0))
    for r in range(P):
        stash, buf = candidates.schedule_samples(P, r, b, n, k)
        assert mem(1.0).stage_bytes(2 * r, 2 * r + 2, stash, buf).total == pytest.approx(v[r].memory.total)


def test_unequal_shares_are_refused_by_name() -> None:
    t = template().model_copy(update={"batch_shares": {"n0:0": 20, "n0:1": 12}})
    with pytest.raises(ValueError, match="batch_shares"):
        memory_curve(t, mem(1.0))


def test_recompute_keeps_boundaries_and_one_micro_batch() -> None:
    """GPipe k = 8, b = 4 with re-materialisation: stage 0 keeps its output (10 MB per sample) for
    all 32 stashed samples and recomputes one micro-batch of 4 x 20 MB; stage 1 keeps its input and
    output (10 + 10 MB); buffers and parameters as without."""
    plan = with_kb(template(), 8, 4)
    plain, remat = plan_memory(plan, mem(1.0)), plan_memory(plan, mem(1.0), recompute=True)
    assert plain[0].memory.activations == pytest.approx(32 * 20 * MB)
    assert remat[0].memory.activations == pytest.approx(4 * 20 * MB + 32 * 10 * MB)
    assert remat[1].memory.activations == pytest.approx(4 * 20 * MB + 32 * 20 * MB)
    for p, r in zip(plain, remat, strict=True):
        assert (r.memory.buffers, r.memory.params, r.capacity) == (
            p.memory.buffers,
            p.memory.params,
            p.capacity,
        )
    # activation factor 1: stage 1's kept boundaries (20 MB per sample) are as large as its stash,
    # so re-materialising costs it the recomputed micro-batch more (1360 vs 1280 MB)
    assert remat[1].memory.total > plain[1].memory.total
    # factor 16 (what stored activations are beside a layer's output): it fits where GPipe does not
    m16 = MemoryModel(
        model(), cluster(3.0), MemoryConfig(optimizer="sgd", device_usable=0.9, activation_factor=16)
    )
    assert plan_memory_reasons(plan, m16) and not plan_memory_reasons(plan, m16, recompute=True)
