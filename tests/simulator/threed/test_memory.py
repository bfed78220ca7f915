"""3D memory model: Korthikanti et al.'s activation formula by hand, ZeRO sharding, 1F1B, OOM."""

from __future__ import annotations

import pytest

from simulator.spec import DeviceType
from simulator.threed import GPTConfig, ThreeDPlan, layer_activation_bytes, predict_memory, stage_params
from simulator.threed.memory import MemoryConfig, in_flight

# GPT-3 175B's layer (Korthikanti et al. 2022, Table 3): s = 2048, h = 12288, a = 96; t = 8, b = 1
GPT3 = GPTConfig(hidden=12288, heads=96, layers=96, seq=2048)
A100 = DeviceType(name="A100-80", fp32_tflops=19.5, fp16_tflops=312.0, memory_gb=80.0, memory_bw_gbs=2039.0)


def test_korthikanti_table2_by_hand() -> None:
    sbh = 2048 * 1 * 12288  # 25,165,824
    # no recompute, tensor parallel: sbh(10 + 24/t + 5as/(ht)) = sbh(10 + 3 + 10) = 23 sbh
    assert layer_activation_bytes(GPT3, ThreeDPlan(tp=8)) == 23 * sbh == 578_813_952
    # + sequence parallel: sbh/t (34 + 5as/h) = sbh/8 · 114
    assert layer_activation_bytes(GPT3, ThreeDPlan(tp=8, sequence_parallel=True)) == sbh // 8 * 114
    # selective recompute: sbh(10 + 24/t) = 13 sbh; with SP 34 sbh/t
    assert layer_activation_bytes(GPT3, ThreeDPlan(tp=8, recompute="selective")) == 13 * sbh
    assert (
        layer_activation_bytes(GPT3, ThreeDPlan(tp=8, recompute="selective", sequence_parallel=True))
        == 34 * sbh / 8
    )
    # full recompute: the layer input, 2sbh
    assert layer_activation_bytes(GPT3, ThreeDPlan(tp=8, recompute="full")) == 2 * sbh
    # one GPU, no parallelism: sbh(34 + 5as/h) = sbh · 114
    assert layer_activation_bytes(GPT3, ThreeDPlan()) == 114 * sbh


def test_model_states_16_bytes_per_parameter_sharded_by_zero() -> None:
    cfg = GPTConfig(hidden=1024, heads=16, layers=24)
    n = stage_params(cfg, 1, 1, 0)
    per = [predict_memory(cfg, ThreeDPlan(dp=4, zero_stage=z), A100).stages[0] for z in range(4)]
    assert per[0].params + per[0].grads + per[0].optimizer == pytest.approx(16 * n)
    assert per[1].optimizer == pytest.approx(12 * n / 4) and per[1].grads == pytest.approx(2 * n)
    assert per[2].grads == pytest.approx(2 * n / 4) and per[2].params == pytest.approx(2 * n)
    assert per[3].params == pytest.approx(2 * n / 4)


def test_1f1b_stage_i_holds_p_minus_i_micro_batches() -> None:
    plan = ThreeDPlan(pp=4, num_micro_batches=8)
    assert [in_flight(plan, i) for i in range(4)] == [4, 3, 2, 1]
    assert in_flight(ThreeDPlan(pp=4, num_micro_batches=2), 0) == 2
    assert in_flight(ThreeDPlan(pp=4, num_micro_batches=8, schedule="gpipe"), 3) == 8


def test_activation_part_by_hand() -> None:
    cfg = GPTConfig(hidden=1024, heads=16, layers=24, seq=1024)
    plan = ThreeDPlan(tp=2, pp=2, micro_batch=4, num_micro_batches=8)
    sbh = 1024 * 4 * 1024
    layer = sbh * (10 + 24 / 2 + 5 * 16 * 1024 / (1024 * 2))
    st = predict_memory(cfg, plan, A100).stages
    assert st[0].activations == pytest.approx(12 * layer * 2 + sbh * 2)  # 2 in flight + dropout masks
    # last stage: 1 in flight, the final norm's input and output (2 x 2 B x sbh) and 6 B per logit
    assert st[1].activations == pytest.approx(
        12 * layer * 1 + 4 * sbh + 6 * 1024 * 4 * cfg.padded_vocab(2) / 2
    )


def test_element_size_generalises_the_published_terms() -> None:
    # fp32 activations: sbh(16e + 2) + (2e + 1)·a·s²·b = 66 sbh + 9 a s² b on one GPU
    cfg = GPTConfig(hidden=256, heads=4, layers=2, seq=256)
    sbh = 256 * 2 * 256
    assert layer_activation_bytes(cfg, ThreeDPlan(micro_batch=2), 4) == 66 * sbh + 9 * 4 * 256 * 256 * 2


def test_grads_freed_peak_is_the_larger_phase() -> None:
    cfg = GPTConfig(hidden=256, heads=4, layers=2, seq=256, vocab=8192)
    kept = predict_memory(cfg, ThreeDPlan(micro_batch=2), A100).stages[0]
    freed = predict_memory(cfg, ThreeDPlan(micro_batch=2), A100, MemoryConfig(grads_persist=False)).stages[0]
    assert freed.allocated == pytest.approx(kept.allocated - min(kept.grads, kept.activations))


def test_predicts_oom() -> None:
    # GPT-3 175B on 8 A100-80GB with TP only: 16 bytes x 22 B parameters per GPU >> 80 GB
    assert not predict_memory(GPT3, ThreeDPlan(tp=8), A100).fits
    # a 350M GPT fits one GPU with full recompute ...
    small = GPTConfig(hidden=1024, heads=16, layers=24, seq=1024)
    assert predict_memory(small, ThreeDPlan(micro_batch=8, recompute="full"), A100).fits
    # ... and a 64-sample micro-batch without recompute does not (114 sbh per layer: 24 x 7.6 GB)
    assert not predict_memory(small, ThreeDPlan(micro_batch=64), A100).fits


def test_fragmentation_and_outside_allocator() -> None:
    cfg = GPTConfig(hidden=1024, heads=16, layers=24)
    cfgm = MemoryConfig(fragmentation=1.0, nccl_bytes_per_comm=1e8, context_bytes=5e8)
    st = predict_memory(cfg, ThreeDPlan(tp=2, dp=2), A100, cfgm).stages[0]
    assert st.total == pytest.approx(st.allocated + 2 * 1e8 + 5e8)
