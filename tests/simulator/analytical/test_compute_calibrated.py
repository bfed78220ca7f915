"""Roofline terms the CPU calibration needs: 1x1 convolutions as GEMMs, first-touch bytes, backward shares."""

from __future__ import annotations

import pytest

from simulator.analytical import CostParams
from simulator.analytical import compute as c
from simulator.analytical.compute import FRESH_TENSOR_BYTES, OpEfficiency
from simulator.profile.calibrate import (
    CLASS_KEYS,
    Calibration,
    ClassFit,
    ModelScales,
    calibration_from,
    efficiency_of,
    merge_times,
    micro_layers,
)
from simulator.spec import DeviceType, Layer, ModelSpec, Variable

CPU = DeviceType(name="cpu", fp32_tflops=0.1, fp16_tflops=0.1, memory_gb=64, memory_bw_gbs=40.0,
                 launch_overhead_us=0.0, first_touch_gbs=2.0)  # fmt: skip
ONE = OpEfficiency(gemm=1.0, conv=1.0, attention=1.0, vector=1.0, memory=1.0, norm=1.0)


def _conv(kernel: int) -> Layer:
    return Layer(name=f"c{kernel}", kind="conv2d", fwd_flops=1e6, activation_bytes=4e3,
                 variables=(Variable(name=f"c{kernel}.w", shape=(8, 8, kernel, kernel)),))  # fmt: skip


def test_a_1x1_convolution_is_a_gemm() -> None:
    assert c.layer_class(_conv(1)) == "gemm"
    assert c.layer_class(_conv(3)) == "conv"


def _big_linear() -> ModelSpec:
    # A 40 MiB weight (over FRESH_TENSOR_BYTES) reading the model input; 1 row per sample.
    n = 10 * 2**20 // 1024
    w = Variable(name="fc.w", shape=(n, 1024))
    fc = Layer(name="fc", kind="linear", fwd_flops=2.0 * n * 1024, activation_bytes=4.0 * n,
               variables=(w,), fwd_bytes=0.0, fwd_kernels=1)  # fmt: skip
    return ModelSpec(name="big", batch_size=1, layers=(fc,))


def test_fresh_parameter_gradients_are_written_at_the_first_touch_rate() -> None:
    model = _big_linear()
    w_bytes = 40 * 2**20
    assert w_bytes >= FRESH_TENSOR_BYTES
    work = c.layer_work(model, 1)
    assert work.fresh[:, 0].tolist() == [0.0, w_bytes]
    t = c.layer_times(model, CPU, 1, CostParams(op_efficiency=ONE))
    # Backward: weight gradient only (reads the model input): 2·n·1024 FLOPs at 1e11 FLOP/s against
    # 2·w bytes (read W, write dW) less the fresh dW over 40 GB/s, plus dW at 2 GB/s first touch.
    flops = 2.0 * 10 * 2**20
    assert t.bwd[0] == pytest.approx(max(flops / 1e11, w_bytes / 40e9) + w_bytes / 2e9)
    # A GPU's caching allocator: no first-touch term, the bandwidth bound only.
    gpu = CPU.model_copy(update={"first_touch_gbs": None})
    t_gpu = c.layer_times(model, gpu, 1, CostParams(op_efficiency=ONE))
    assert t_gpu.bwd[0] == pytest.approx(max(flops / 1e11, 2 * w_bytes / 40e9))


def test_the_backward_pass_takes_its_own_shares() -> None:
    model = ModelSpec(name="m", batch_size=1, layers=(_conv(3),))
    half = OpEfficiency(gemm=1.0, conv=0.5, attention=1.0, vector=1.0, memory=1.0, norm=1.0)
    fwd_only = c.layer_times(model, CPU, 4, CostParams(op_efficiency=ONE))
    split = c.layer_times(
        model, CPU, 4, CostParams(op_efficiency=OpEfficiency(backward=half, **_fields(ONE)))
    )
    assert split.fwd[0] == pytest.approx(fwd_only.fwd[0])
    assert split.bwd[0] == pytest.approx(2 * fwd_only.bwd[0])  # compute-bound: half the share, twice the time
    with pytest.raises(ValueError, match="backward"):
        OpEfficiency(backward=OpEfficiency(backward=ONE))


def _fields(e: OpEfficiency) -> dict[str, float]:
    return {k: getattr(e, k) for k in ("gemm", "conv", "attention", "vector", "memory", "norm")}


def _fits() -> tuple[ClassFit, ...]:
    keys = ("gemm", "conv", "attention", "norm", "layernorm", "embedding", "memory")
    return tuple(
        ClassFit(k, (1.0, 1.0), (0.5, 0.5), (0.1 * (i + 1), 0.05 * (i + 1))) for i, k in enumerate(keys)
    )


def test_efficiencies_come_from_the_micro_layer_fits_by_pass() -> None:
    eff = efficiency_of(_fits())
    assert (
        eff.gemm,
        eff.conv,
        eff.attention,
        eff.norm,
        eff.layernorm,
        eff.embedding,
        eff.memory,
    ) == pytest.approx((0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7))
    assert eff.backward is not None and eff.backward.conv == pytest.approx(0.1)
    assert eff.memory_of("layernorm") == pytest.approx(0.5) and eff.pass_(1).memory_of(
        "embedding"
    ) == pytest.approx(0.3)


def test_model_scales_multiply_the_matrix_shares_capped_at_one() -> None:
    cal = Calibration(CPU.model_copy(update={"launch_overhead_us": 2.0}), efficiency_of(_fits()), _fits())
    dev, eff = ModelScales(matrix=4.0, launch=1.5).apply(cal)
    assert (eff.gemm, eff.conv, eff.attention) == pytest.approx((0.4, 0.8, 1.0))
    assert eff.norm == pytest.approx(0.4)  # memory-bound classes untouched
    assert eff.backward is not None and eff.backward.gemm == pytest.approx(0.2)
    assert dev.launch_overhead_us == pytest.approx(3.0)


def test_every_micro_layer_is_its_class() -> None:
    seen = set()
    for key, spec in micro_layers().items():
        work = c.layer_work(spec, 2)
        last = len(spec.layers) - 1
        cls = work.op_class[last]
        want = key.split(":")[0]
        assert (cls if want in ("gemm", "conv", "attention") else work.memory_key[last]) == want
        seen.add(want)
    assert seen == set(CLASS_KEYS)
    # the roofline runs 1x1 convolutions at the GEMM share, so the GEMM share is measured on some
    assert any(k.startswith("gemm:conv1x1") for k in micro_layers())


def test_a_class_share_is_the_geometric_mean_of_its_micro_layers() -> None:
    fits = [*_fits(), ClassFit("gemm:other", (1.0, 1.0), (0.5, 0.5), (0.4, 0.2))]
    eff = efficiency_of(fits)
    assert eff.gemm == pytest.approx((0.1 * 0.4) ** 0.5)
    assert eff.backward is not None and eff.backward.gemm == pytest.approx((0.05 * 0.2) ** 0.5)
    with pytest.raises(ValueError, match="conv"):
        efficiency_of([f for f in fits if f.cls != "conv"])


def _times(scale: float = 1.0) -> dict[str, float]:
    """Seconds for every key calibration_times gives: 100 GFLOP/s on the peak benchmarks, 25 GB/s
    copy, 2.5 GB/s first touch, 4 us per op, 2 / 4 ms per micro-layer pass (times ``scale``)."""
    out = {
        "matmul512": 2 * 512**3 / 1e11,
        "matmul1024": 2 * 1024**3 / 1e11,
        "conv3x3": 2 * 2 * 64 * 64 * 9 * 56 * 56 / 1e11,
        "copy": 2 * 16 * 2**20 * 4 / 25e9,
        "first_touch": 2 * FRESH_TENSOR_BYTES / 2.5e9,
        "op": 4e-6,
    }
    for key in micro_layers():
        out[f"{key}/fwd"], out[f"{key}/bwd"] = 2e-3, 4e-3
    return {k: v * scale for k, v in out.items()}


def test_calibration_from_times_gives_the_device_and_shares() -> None:
    cal = calibration_from(_times(), "cpu", 1)
    dt = cal.device
    assert dt.name == "cpu-calibrated" and "1 torch threads" in dt.source
    assert dt.fp32_tflops == pytest.approx(0.1) and dt.memory_bw_gbs == pytest.approx(25.0)
    assert dt.first_touch_gbs == pytest.approx(2.5) and dt.launch_overhead_us == pytest.approx(4.0)
    spec = micro_layers()["gemm:linear-256x1024x1024"]
    work = c.layer_work(spec, 2)
    fit = next(f for f in cal.fits if f.key == "gemm:linear-256x1024x1024")
    want = work.flops[0, -1] / 1e11 / (2e-3 - work.kernels[0, -1] * 4e-6)
    assert fit.share[0] == pytest.approx(min(1.0, want))


def test_merged_calibrations_take_the_median_key_by_key() -> None:
    runs = [_times(1.0), _times(3.0), _times(1.2)]
    merged = merge_times(runs)
    assert merged == pytest.approx(_times(1.2))
    assert calibration_from(merged, "cpu").device.fp32_tflops == pytest.approx(0.1 / 1.2)
    with pytest.raises(ValueError, match="at least one"):
        merge_times([])


def test_attention_projections_take_the_gemm_share_and_the_core_the_attention_share() -> None:
    e, tokens = 64, 10
    proj = 2.0 * tokens * (3 * e * e + e * e)  # in_proj (3E, E) and out_proj (E, E) per token
    core = 4.0 * tokens * tokens * e  # QK^T and AV
    mha = Layer(
        name="mha",
        kind="multiheadattention",
        fwd_flops=proj + core,
        activation_bytes=4.0 * tokens * e,
        variables=(
            Variable(name="in.w", shape=(3 * e, e)),
            Variable(name="in.b", shape=(3 * e,)),
            Variable(name="out.w", shape=(e, e)),
            Variable(name="out.b", shape=(e,)),
        ),
        fwd_bytes=0.0,
        fwd_kernels=0,
    )
    model = ModelSpec(name="m", batch_size=1, layers=(mha,))
    assert c.layer_work(model, 1).gemm_part[0] == pytest.approx(proj / (proj + core))
    eff = OpEfficiency(gemm=0.5, conv=1.0, attention=0.1, vector=1.0, memory=1.0, norm=1.0)
    t = c.layer_times(model, CPU, 1, CostParams(op_efficiency=eff))
    assert t.fwd[0] == pytest.approx(proj / (1e11 * 0.5) + core / (1e11 * 0.1))
