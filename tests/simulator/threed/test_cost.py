"""3D cost terms worked by hand: Megatron's TP pattern, ZeRO stages, recompute, fused attention, 1F1B."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from simulator.analytical.compute import OpEfficiency, op_class
from simulator.analytical.params import CostParams
from simulator.spec import DeviceType
from simulator.threed import (
    BusBwCurve,
    Collectives,
    FrameworkParams,
    GPTConfig,
    ThreeDPlan,
    flash_bytes,
    predict,
    stage_params,
    stage_spec,
    tp_comm_seconds,
)
from simulator.threed.cost import tp_allreduces
from simulator.threed.layers import softmax_fused

CFG = GPTConfig(hidden=1024, heads=16, layers=24, seq=1024)
CURVE = BusBwCurve(alpha_s=10e-6, busbw_max=100e9, half_bytes=1e6)
COMMS = Collectives(CURVE)
# 100 TFLOPS fp16, bandwidth so large that bytes never bound, no launch cost: time = FLOPs / ceiling.
FLOPS_ONLY = DeviceType(
    name="flops-only",
    fp32_tflops=10.0,
    fp16_tflops=100.0,
    memory_gb=80.0,
    memory_bw_gbs=1e6,
    launch_overhead_us=0.0,
)
UNIT = CostParams(op_efficiency=OpEfficiency(gemm=1.0, attention=1.0, memory=1.0))
NO_HOST = FrameworkParams(
    micro_overhead_s=0.0, step_overhead_s=0.0, host_per_kernel_us=0.0, host_per_call_us=0.0
)


def test_stage_flops_are_megatrons_count() -> None:
    # per layer 24sh²/t + 4s²h/t, logits 2shV/t with V padded to a multiple of 128·t
    s, h, t = 1024, 1024, 2
    spec = stage_spec(CFG, tp=t, pp=2, stage=1)
    v = CFG.padded_vocab(t)
    assert v == 50432
    want = 12 * (24 * s * h * h + 4 * s * s * h) / t + 2 * s * h * v / t
    assert sum(ly.fwd_flops for ly in spec.layers) == pytest.approx(want)


def test_tp_pattern_two_allreduces_per_block_each_way() -> None:
    # stage 0 of 2, 12 layers: 4 per layer (2 fwd after proj/fc2, 2 bwd before qkv/fc1) + embedding
    plan = ThreeDPlan(tp=4, pp=2, micro_batch=2, num_micro_batches=2)
    assert tp_allreduces(CFG, plan, 0) == 12 * 4 + 1
    assert tp_allreduces(CFG, plan, 1) == 12 * 4 + 1  # + the logits' backward
    full = ThreeDPlan(tp=4, pp=2, micro_batch=2, num_micro_batches=2, recompute="full")
    assert tp_allreduces(CFG, full, 0) == 12 * 6 + 1  # the recomputed forward's 2 again
    assert tp_allreduces(CFG, ThreeDPlan(tp=1, pp=2), 0) == 0
    # seconds: b·s·h·2 = 4 MiB among 4 GPUs: 10 us + 1.5 · (4194304 + 1e6) / 100e9
    one = 10e-6 + 1.5 * (4 * 2**20 + 1e6) / 100e9
    assert tp_comm_seconds(CFG, plan, 0, COMMS) == pytest.approx(49 * one)
    xent = 10e-6 + 1.5 * (2 * 1024 * 4 + 1e6) / 100e9
    assert tp_comm_seconds(CFG, plan, 1, COMMS) == pytest.approx(49 * one + 3 * xent)


def test_recompute_adds_the_transformer_forward() -> None:
    plan = ThreeDPlan(tp=2, pp=1, micro_batch=1, num_micro_batches=1)
    none = predict(CFG, plan, FLOPS_ONLY, COMMS, UNIT, NO_HOST)
    full = predict(CFG, ThreeDPlan(tp=2, micro_batch=1, recompute="full"), FLOPS_ONLY, COMMS, UNIT, NO_HOST)
    sel = predict(
        CFG, ThreeDPlan(tp=2, micro_batch=1, recompute="selective"), FLOPS_ONLY, COMMS, UNIT, NO_HOST
    )
    s, h, t = 1024, 1024, 2
    layer_fwd = (24 * s * h * h + 4 * s * s * h) / t / 100e12
    assert none.stage_recompute == (0.0,)
    assert full.stage_recompute[0] == pytest.approx(24 * layer_fwd, rel=1e-3)  # + norms' bytes at 1 PB/s
    assert sel.stage_recompute[0] == pytest.approx(
        24 * 4 * s * s * h / t / 100e12, rel=1e-3
    )  # the cores only
    # the forward itself: layers + logits (embedding and norms move bytes only)
    assert none.stage_forward[0] == pytest.approx(
        24 * layer_fwd + 2 * s * h * CFG.padded_vocab(t) / t / 100e12, rel=1e-3
    )
    # matrix backward = 2x forward (input and weight gradients)
    assert none.stage_backward[0] == pytest.approx(2 * none.stage_forward[0], rel=1e-3)
    assert full.total - none.total == pytest.approx(
        24 * layer_fwd + 24 * 2 * (10e-6 + (2**21 + 1e6) / 100e9), rel=1e-3
    )


def test_fused_attention_is_the_io_aware_count() -> None:
    # Dao et al. 2022: B_c = ⌈M / 4de⌉ = ⌈167936 / 512⌉ = 328, T_c = ⌈1024 / 328⌉ = 4;
    # 16 heads · 2 B · (2·1024·64 + 4·4·1024·64) = 37,748,736 bytes
    assert flash_bytes(1024, 64, 16) == 37_748_736
    assert op_class("flash_attention") == "attention"
    fused = stage_spec(CFG, 1, 1, 0, fused=True).layers[3 + 2]
    plain = stage_spec(CFG, 1, 1, 0).layers[3 + 2]
    assert fused.name == plain.name == "l0.attn_core"
    assert fused.fwd_flops == plain.fwd_flops == 4 * 1024 * 1024 * 1024
    assert fused.fwd_bytes == 37_748_736
    # Megatron's core: q, k, v, out (4sh·2) + 6.5 x the 16·s² fp16 scores
    assert plain.fwd_bytes == 4 * 1024 * 1024 * 2 + 6.5 * 16 * 1024 * 1024 * 2


def test_megatron_softmax_kernel_rule() -> None:
    assert softmax_fused(CFG, tp=8, micro_batch=2)  # 2 · 16/8 = 4 attention batches
    assert not softmax_fused(CFG, tp=8, micro_batch=1)  # 2: PyTorch's unfused fp32 path
    unfused = stage_spec(CFG, 8, 1, 0, micro_batch=1).layers[5]
    fused = stage_spec(CFG, 8, 1, 0, micro_batch=2).layers[5]
    assert unfused.fwd_bytes is not None and fused.fwd_bytes is not None
    assert unfused.fwd_bytes - fused.fwd_bytes == pytest.approx(12.5 * 2 * 1024 * 1024 * 2)


def test_zero_stages_dp_sync_by_hand() -> None:
    base = dict(tp=1, pp=1, dp=4, micro_batch=1, num_micro_batches=2)
    g = 2 * stage_params(CFG, 1, 1, 0)
    ar = 10e-6 + 1.5 * (g + 1e6) / 100e9
    rs = 10e-6 + 0.75 * (g + 1e6) / 100e9
    z0 = predict(CFG, ThreeDPlan(**base, zero_stage=0), FLOPS_ONLY, COMMS, UNIT, NO_HOST)  # type: ignore[arg-type]
    z1 = predict(CFG, ThreeDPlan(**base, zero_stage=1), FLOPS_ONLY, COMMS, UNIT, NO_HOST)  # type: ignore[arg-type]
    z2 = predict(CFG, ThreeDPlan(**base, zero_stage=2), FLOPS_ONLY, COMMS, UNIT, NO_HOST)  # type: ignore[arg-type]
    z3 = predict(CFG, ThreeDPlan(**base, zero_stage=3), FLOPS_ONLY, COMMS, UNIT, NO_HOST)  # type: ignore[arg-type]
    assert z0.dp_sync == pytest.approx(ar)
    assert z1.dp_sync == pytest.approx(ar)  # reduce-scatter + all-gather: the same ring bytes
    # ZeRO-2: each micro-batch's reduce-scatter hides behind its backward when shorter; then the
    # parameter all-gather
    bwd = z2.stage_backward[0]
    assert z2.dp_sync == pytest.approx(2 * max(0.0, rs - bwd) + rs)
    fwd = z3.stage_forward[0]
    assert z3.dp_sync == pytest.approx(z2.dp_sync + 2 * (max(0.0, rs - fwd) + max(0.0, rs - bwd)))
    # the optimizer step shards with ZeRO >= 1: a quarter of the bytes
    assert z1.optimizer == pytest.approx(z0.optimizer / 4)


def test_1f1b_length_by_hand() -> None:
    plan = ThreeDPlan(tp=1, pp=4, dp=1, micro_batch=1, num_micro_batches=8)
    c = predict(CFG, plan, FLOPS_ONLY, COMMS, UNIT, NO_HOST)
    # + each micro-batch after the first adds its gradients into .grad: 7/8 x 3 x the fp16 bytes
    acc = [
        7 / 8 * 3 * sum(v.bytes for ly in stage_spec(CFG, 1, 4, i).layers for v in ly.variables) / 1e15
        for i in range(4)
    ]
    x = [f + b + a for f, b, a in zip(c.stage_forward, c.stage_backward, acc, strict=True)]
    q = 10e-6 + (2**21 + 1e6) / 100e9
    assert c.p2p == pytest.approx(q)
    assert c.pipeline == pytest.approx(sum(x) + 2 * 3 * q + 7 * (max(x) + 2 * q), rel=1e-6)
    # near-uniform stages (a 128-word vocabulary: no heavy head): bubble (p-1)/(m+p-1) = 3/11
    tiny = GPTConfig(hidden=1024, heads=16, layers=24, seq=1024, vocab=128)
    u = predict(tiny, plan, FLOPS_ONLY, COMMS, UNIT, NO_HOST)
    assert u.bubble == pytest.approx(3 / 11, abs=0.01)


def test_host_bound_micro_batches() -> None:
    # with a huge launch cost the host decides: x = smooth max(gpu, host) -> host
    slow_host = FLOPS_ONLY.model_copy(update={"launch_overhead_us": 10_000.0})
    plan = ThreeDPlan(tp=1, pp=1, micro_batch=1)
    c = predict(CFG, plan, slow_host, COMMS, UNIT, NO_HOST)
    assert c.stage_host[0] > 100 * (c.stage_forward[0] + c.stage_backward[0])
    assert c.pipeline == pytest.approx(c.stage_host[0], rel=1e-3)


def test_host_calls_of_a_megatron_layer_by_hand() -> None:
    # 2 layers, tp 1, b 1 (16 heads: fused softmax), one micro-batch, no recompute; 5 us launch +
    # 10 us dispatch per kernel, 5 us per call that launches nothing
    cfg = GPTConfig(hidden=1024, heads=16, layers=2, seq=1024)
    dev = FLOPS_ONLY.model_copy(update={"launch_overhead_us": 5.0})
    fw = FrameworkParams(
        micro_overhead_s=0.0, step_overhead_s=0.0, host_per_kernel_us=10.0, host_per_call_us=5.0
    )
    c = predict(cfg, ThreeDPlan(), dev, COMMS, UNIT, fw)
    # forward: ln, qkv, core 6, proj, drop-add, ln, fc1, gelu, fc2, drop-add = 15 kernels + the 2
    # torch.tensor(0.0, device=...) copies; 38 calls (views, RNG tracker, Functions, modules)
    fwd = 17 * 15 + 38 * 5
    # backward: 4 linears x 3 (dgrad, wgrad, bias), core 12, 2 norms, 2 drop-adds, gelu = 29; 20 calls
    bwd = 29 * 15 + 20 * 5
    # embedding (wte 4 + 8, wpe 1 + 2, dropout 1 + 1), final norm 1 + 1, logits 1 + 2, xent 8 + 8
    rest = 38 * 15
    assert c.stage_host[0] == pytest.approx((2 * (fwd + bwd) + rest) * 1e-6)


def test_per_layer_sync_sums_segment_maxima() -> None:
    # Megatron-DeepSpeed synchronises host and GPU in every layer's forward: each layer's forward
    # and backward is its own max(host, GPU). Only calls cost host time here (10 us each): forward
    # 38 calls = 380 us > its GPU (28·2^30 FLOP / 100 TFLOPS = 300.6 us); backward 20 calls =
    # 200 us < its GPU (601.3 us). Without syncs the stage is GPU-bound as a whole.
    fw = FrameworkParams(
        micro_overhead_s=0.0,
        step_overhead_s=0.0,
        host_per_kernel_us=0.0,
        host_per_call_us=10.0,
        overlap_sharpness=50.0,
    )
    plan = ThreeDPlan()
    synced = predict(CFG, plan, FLOPS_ONLY, COMMS, UNIT, fw)
    free = predict(CFG, plan, FLOPS_ONLY, COMMS, UNIT, replace(fw, syncs_per_layer=0))
    layer_fwd = 28 * 2**30 / 100e12
    assert free.pipeline == pytest.approx(free.stage_forward[0] + free.stage_backward[0], rel=1e-6)
    assert synced.pipeline - free.pipeline == pytest.approx(24 * (380e-6 - layer_fwd), rel=1e-3)


def test_sync_waits_for_the_attention_allreduce() -> None:
    # Host-bound (1 ms per call and kernel) at tp 2: without syncs the host hides every collective;
    # with Megatron-DeepSpeed's sync after each layer's attention block, the proj all-reduce (and
    # the bias-dropout-add and norm after it) is waited for: once per layer forward.
    fw = FrameworkParams(
        micro_overhead_s=0.0,
        step_overhead_s=0.0,
        host_per_kernel_us=1000.0,
        host_per_call_us=1000.0,
        overlap_sharpness=50.0,
    )
    plan = ThreeDPlan(tp=2)
    synced = predict(CFG, plan, FLOPS_ONLY, COMMS, UNIT, fw)
    free = predict(CFG, plan, FLOPS_ONLY, COMMS, UNIT, replace(fw, syncs_per_layer=0))
    ar = 10e-6 + 1.0 * (2**21 + 1e6) / 100e9  # 2 MiB among 2 GPUs
    # the 2 torch.tensor copies per layer are launches too: 48 x 1 ms more host time
    assert synced.stage_host[0] - free.stage_host[0] == pytest.approx(48e-3)
    assert free.pipeline == pytest.approx(free.stage_host[0], rel=1e-6)
    assert synced.pipeline - free.pipeline == pytest.approx(48e-3 + 24 * ar, rel=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tp": 3}, "tp"),
        ({"pp": 5}, "pp"),
        ({"zero_stage": 4}, "zero_stage"),
        ({"recompute": "some"}, "recompute"),
    ],
)
def test_bad_plans_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ThreeDPlan(**kwargs).check(CFG)  # type: ignore[arg-type]


def test_iteration_is_finite_for_every_kind() -> None:
    for tp in (1, 2, 4, 8):
        for zero in range(4):
            plan = ThreeDPlan(
                tp=tp, pp=2, dp=2, micro_batch=2, num_micro_batches=4, zero_stage=zero, recompute="full"
            )
            assert math.isfinite(predict(CFG, plan, FLOPS_ONLY, COMMS).total)


def test_wave_quantisation_by_hand() -> None:
    from simulator.threed.layers import sm_count, wave_efficiency

    assert sm_count("A100-SXM4-80GB") == 108
    assert sm_count("GH200-96GB") == 132 and sm_count("L4-24GB") == 58 and sm_count("L40S-48GB") == 142
    assert sm_count("flops-only") is None
    # TP 8, b 1, h 1024: QKV output 1024 x 384 = 8 x 3 = 24 tiles on 108 SMs: one wave, 24/108 busy
    assert wave_efficiency(1024, 384, 108) == pytest.approx(24 / 108)
    # 109 tiles: two waves, 109/216
    assert wave_efficiency(109 * 128, 128, 108) == pytest.approx(109 / 216)
    # the forward GEMM of a spec'd linear costs FLOPs / efficiency on an A100-named device
    a100 = FLOPS_ONLY.model_copy(update={"name": "A100-test"})
    plan = ThreeDPlan(tp=8)
    fw = replace(NO_HOST, syncs_per_layer=0)
    q = predict(CFG, plan, a100, COMMS, UNIT, fw)
    flat = predict(CFG, plan, a100, COMMS, UNIT, replace(fw, wave_quantisation=False))
    s, h = 1024, 1024
    # per layer: qkv 24 tiles, proj 1024 x 1024 = 64, fc1 1024 x 512 = 32, fc2 64 (all one wave)
    extra = sum(
        2 * s * k * n / 100e12 * (108 / tiles - 1)
        for k, n, tiles in [(h, 3 * h // 8, 24), (h // 8, h, 64), (h, 4 * h // 8, 32), (4 * h // 8, h, 64)]
    )
    # logits: 1024 x 6400 (V padded to 51200 = 50 x 1024, / 8): 8 x 50 = 400 tiles, 4 waves (432 slots)
    extra_logits = 2 * s * h * 6400 / 100e12 * (432 / 400 - 1)
    assert q.stage_forward[0] - flat.stage_forward[0] == pytest.approx(24 * extra + extra_logits, rel=1e-6)
