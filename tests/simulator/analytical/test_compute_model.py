"""The roofline compute model by hand, its backward rules, dtypes, profiles, and one function for all users."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from simulator.analytical import CostParams, cost_breakdown
from simulator.analytical import compute as c
from simulator.analytical import formulas as f
from simulator.analytical.arrays import cluster_arrays, model_arrays
from simulator.analytical.baselines import baseline
from simulator.analytical.batch import encode
from simulator.analytical.compute import OpEfficiency
from simulator.analytical.reference import reference_cost
from simulator.analytical.testing import make_cluster
from simulator.analytical.vectorised import score
from simulator.profile import ProfileStore, profile_model
from simulator.spec import DeviceType, Layer, ModelSpec, SpecError, Variable
from simulator.spec.profile import LayerTime, Profile, load_profile, parse_profile

GPU = DeviceType(
    name="g",
    fp32_tflops=10.0,
    fp16_tflops=100.0,
    tf32_tflops=50.0,
    memory_gb=16,
    memory_bw_gbs=1000.0,
    launch_overhead_us=4.0,
)
ONE = OpEfficiency(gemm=1.0, conv=0.5, attention=1.0, vector=1.0, memory=1.0, norm=1.0)


def _conv_bn_model(dtype: str = "float32") -> ModelSpec:
    """conv (reads the model input) -> batchnorm -> linear head."""
    conv = Layer(
        name="conv",
        kind="conv2d",
        fwd_flops=1e9,
        activation_bytes=1e6,
        variables=(Variable(name="conv.w", shape=(64, 3, 3, 3), dtype=dtype),),  # type: ignore[arg-type]
    )
    bn = Layer(
        name="bn",
        kind="batchnorm2d",
        fwd_flops=0.0,
        activation_bytes=1e6,
        variables=(
            Variable(name="bn.g", shape=(64,), dtype=dtype),
            Variable(name="bn.b", shape=(64,), dtype=dtype),
        ),  # type: ignore[arg-type]
        inputs=("conv",),
    )
    head = Layer(
        name="fc",
        kind="linear",
        fwd_flops=2e6,
        activation_bytes=40.0,
        variables=(
            Variable(name="fc.w", shape=(10, 100_000), dtype=dtype),  # type: ignore[arg-type]
            Variable(name="fc.b", shape=(10,), dtype=dtype),  # type: ignore[arg-type]
        ),
        inputs=("bn",),
        fwd_bytes=4e5,
        fwd_kernels=1,
    )
    return ModelSpec(name="cnn", batch_size=8, layers=(conv, bn, head))


def test_roofline_by_hand() -> None:
    model = _conv_bn_model()
    t = c.layer_times(model, GPU, 8, CostParams(op_efficiency=ONE))
    # conv, fp32, reads the model input: forward 8e9 FLOPs / (10e12 · 0.5) = 1.6e-3 s against
    # (1e6 in + 1e6 out)·8 + 6912 B of weights over 1e12 B/s = 1.6e-5 s: compute-bound; 1 kernel.
    assert t.fwd[0] == pytest.approx(8e9 / 5e12 + 4e-6)
    # Backward: weight gradient only (no input gradient for the model input): same FLOPs, 1 kernel.
    assert t.bwd[0] == pytest.approx(8e9 / 5e12 + 4e-6)
    # batchnorm: memory-bound. Forward bytes per sample: in 1e6 + out 1e6, + statistics pass 1e6
    # + ReLU read/write 2e6 = 5e6; · 8 samples + 512 B of parameters; 2 kernels (norm, ReLU).
    assert t.fwd[1] == pytest.approx((5e6 * 8 + 512) / 1e12 + 2 * 4e-6)
    # Backward: 1.6x the activation bytes, parameters read and their gradients written; 2 kernels.
    assert t.bwd[1] == pytest.approx((1.6 * 5e6 * 8 + 2 * 512) / 1e12 + 2 * 4e-6)
    # linear with given fwd_bytes 4e5 and 1 kernel: 1.6e7 FLOPs (1.6e-6 s) vs 4e5·8 + 4,000,040 B
    # (7.2e-6 s): memory-bound. Backward: input and weight gradients: 2x activations and 2x
    # parameters (read W, write dW), 2 kernels + 1 bias reduction.
    assert t.fwd[2] == pytest.approx((4e5 * 8 + 4_000_040) / 1e12 + 4e-6)
    assert t.bwd[2] == pytest.approx((2 * 4e5 * 8 + 2 * 4_000_040) / 1e12 + 3 * 4e-6)
    assert t.source == "roofline" and t.step == pytest.approx(float(t.fwd.sum() + t.bwd.sum()))


def test_dtype_picks_the_tensor_core_peak_and_halves_bytes() -> None:
    fp32 = c.layer_times(_conv_bn_model(), GPU, 8, CostParams(op_efficiency=ONE))
    fp16 = c.layer_times(_conv_bn_model("float16"), GPU, 8, CostParams(op_efficiency=ONE))
    # The conv runs on fp16 tensor cores: 8e9 / (100e12 · 0.5) = 1.6e-4 s, bytes (now 2 per
    # element, traced in fp16) stay smaller: compute-bound still.
    assert fp16.fwd[0] == pytest.approx(8e9 / 50e12 + 4e-6)
    # Mixed precision as a strategy option on the fp32 spec: the same peak; activations and weights
    # move in 2 bytes instead of 4, so the memory-bound batchnorm takes half as long.
    mixed = c.layer_times(_conv_bn_model(), GPU, 8, CostParams(op_efficiency=ONE, compute_dtype="float16"))
    assert mixed.fwd[0] == pytest.approx(fp16.fwd[0])
    assert mixed.fwd[1] - 2 * 4e-6 == pytest.approx((fp32.fwd[1] - 2 * 4e-6) / 2)
    tf32 = c.layer_times(_conv_bn_model(), GPU, 8, CostParams(op_efficiency=ONE, compute_dtype="tf32"))
    assert tf32.fwd[0] == pytest.approx(8e9 / 25e12 + 4e-6)
    # No bf16 path on this device: bf16 runs at the FP32 rate (peak_flops' documented fallback).
    assert c.peak_flops(GPU, "bfloat16", True) == 10e12 and c.peak_flops(GPU, "float16", False) == 10e12


def test_embedding_backward_writes_a_dense_table_but_not_a_sparse_one() -> None:
    def model(sparse: bool) -> ModelSpec:
        emb = Layer(
            name="emb",
            kind="embedding",
            fwd_flops=0.0,
            activation_bytes=256.0,
            variables=(
                Variable(name="e", shape=(1_000_000, 64), sparse=sparse, density=0.01 if sparse else 1.0),
            ),
        )
        fc = Layer(
            name="fc", kind="linear", fwd_flops=2 * 64 * 4, activation_bytes=16, inputs=("emb",),
            variables=(Variable(name="w", shape=(4, 64)),),
        )  # fmt: skip
        return ModelSpec(name="emb", batch_size=4, layers=(emb, fc))

    params = CostParams(op_efficiency=ONE)
    dense, sparse = (c.layer_times(model(s), GPU, 4, params) for s in (False, True))
    assert dense.fwd[0] == sparse.fwd[0] == pytest.approx(2 * 256 * 4 / 1e12 + 4e-6)
    # Dense: gather-backward of the rows (2 · 2 · 256 · 4 B) plus the whole 256 MB table written.
    assert dense.bwd[0] == pytest.approx((2 * 2 * 256 * 4 + 256e6) / 1e12 + 2 * 4e-6)
    assert sparse.bwd[0] == pytest.approx(2 * 2 * 256 * 4 / 1e12 + 2 * 4e-6)


def test_one_function_for_the_scorer_the_reference_loop_and_the_breakdown() -> None:
    model = _conv_bn_model()
    cluster = make_cluster([2, 1])
    params = CostParams(efficiency=0.8)
    want = c.step_seconds(model, cluster.device_type(0), model.batch_size, params)
    assert f.compute_time(model, cluster, params) == pytest.approx(want)
    s = baseline("horovod", model, cluster)
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    assert score(ma, ca, encode(ma, ca, [s, s]), params).t_comp == pytest.approx(np.full(2, want))
    assert reference_cost(model, cluster, s, params).t_comp == pytest.approx(want)
    assert cost_breakdown(model, cluster, s, params).t_comp == pytest.approx(want)


def test_a_profile_replaces_the_roofline_for_its_key_only() -> None:
    model = _conv_bn_model()
    times = (LayerTime(name="conv", fwd_s=0.5, bwd_s=0.25), LayerTime(name="fc", fwd_s=0.125, bwd_s=0.0625))
    prof = Profile(model="cnn", device="g", dtype="float32", batch=8, layers=times)
    params = CostParams(op_efficiency=ONE).with_profiles([prof])
    roof = c.layer_times(model, GPU, 8, CostParams(op_efficiency=ONE))
    t = c.layer_times(model, GPU, 8, params)
    assert t.source == "profile+roofline" and t.profiled_layers == 2  # bn is not in the profile
    assert list(t.fwd) == [0.5, roof.fwd[1], 0.125] and list(t.bwd) == [0.25, roof.bwd[1], 0.0625]
    full = prof.model_copy(update={"layers": (*times, LayerTime(name="bn", fwd_s=1.0, bwd_s=1.0))})
    t = c.layer_times(model, GPU, 8, params.with_profiles([full]))
    assert t.source == "profile" and t.step == pytest.approx(0.5 + 0.25 + 0.125 + 0.0625 + 2.0)
    for other in ({"batch": 16}, {"device": "h"}, {"dtype": "float16"}, {"model": "x"}):
        p = CostParams(op_efficiency=ONE).with_profiles([prof.model_copy(update=other)])
        assert c.layer_times(model, GPU, 8, p).source == "roofline", other


def test_profile_to_cost_model_round_trip(tmp_path: Path) -> None:
    # Measure a tiny spec's layers on this CPU, store the profile, load it back, and the cost
    # model's T_comp is the measured sum, and says so.
    model = _conv_bn_model().model_copy(update={"batch_size": 2})
    torch.set_num_threads(1)
    prof = profile_model(model, device_name="gpu", batch=2, device=torch.device("cpu"), repeats=1)
    assert [lt.name for lt in prof.layers] == ["conv", "bn", "fc"]
    assert all(lt.fwd_s > 0 and lt.bwd_s > 0 for lt in prof.layers)
    store = ProfileStore(tmp_path)
    path = store.save(prof)
    assert path.name == "cnn__gpu__float32__b2.json"
    loaded = store.load_all()
    assert loaded == (prof,) and store.get("cnn", "gpu", "float32", 2) == prof
    cluster = make_cluster([1, 1])  # device type "gpu"
    r = cost_breakdown(
        model, cluster, baseline("horovod", model, cluster), CostParams().with_profiles(loaded)
    )
    assert r.compute_source == "profile" and r.compute_profiled_layers == 3
    assert r.t_comp == pytest.approx(sum(lt.fwd_s + lt.bwd_s for lt in prof.layers))


def test_bad_profile_files_name_the_line(tmp_path: Path) -> None:
    text = """{
  "kind": "profile",
  "model": "cnn",
  "device": "g",
  "batch": 8,
  "layers": [
    {"name": "conv", "fwd_s": 0.1, "bwd_s": 0.2},
    {"name": "bn",
     "fwd_s": "fast", "bwd_s": 0.2}
  ]
}
"""
    with pytest.raises(SpecError) as e:
        parse_profile(text, "p.json")
    assert str(e.value.issues[0].reason).startswith("p.json: line 9: layers.1.fwd_s: ")
    with pytest.raises(SpecError) as e:
        parse_profile(text.replace('"batch": 8,', '"batch": 0,'), "p.json")
    assert e.value.issues[0].reason.startswith("p.json: line 5: batch: ")
    with pytest.raises(SpecError) as e:
        parse_profile(text.replace('"model": "cnn",', '"model": "cnn"'), "p.json")
    assert e.value.issues[0].reason.startswith("p.json: line 4 column 3: ")
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(SpecError, match=r"bad\.json: line 9"):
        ProfileStore(tmp_path).load_all()
    with pytest.raises(SpecError) as e:
        load_profile(tmp_path / "bad.json")
    assert e.value.issues[0].reason.startswith(f"{tmp_path / 'bad.json'}: line 9: layers.1.fwd_s: ")
    with pytest.raises(SpecError) as e:
        parse_profile(text.replace('"bn"', '"conv"').replace('"fast"', "0.1"), "p.json")
    assert e.value.issues[0].reason == "p.json: line 8: layers.1.name: duplicate layer name 'conv'"


def test_op_classes() -> None:
    kinds = {"conv2d": "conv", "linear": "gemm", "matmul": "gemm", "batchnorm2d": "norm", "layernorm": "norm",
             "multiheadattention": "attention", "embedding": "embedding", "add": "elementwise", "cat": "elementwise",
             "weird": "elementwise"}  # fmt: skip
    assert {k: c.op_class(k) for k in kinds} == kinds
    with pytest.raises(ValueError, match=r"op_efficiency\.conv"):
        OpEfficiency(conv=0.0)
    with pytest.raises(ValueError, match="compute_dtype"):
        CostParams(compute_dtype="int8")  # type: ignore[arg-type]


def test_norm_bandwidth_and_attention_cores_have_their_own_efficiency() -> None:
    model = _conv_bn_model()
    base = c.layer_times(model, GPU, 8, CostParams(op_efficiency=ONE))
    half = c.layer_times(
        model, GPU, 8, CostParams(op_efficiency=OpEfficiency(gemm=1.0, conv=0.5, memory=1.0, norm=0.5))
    )
    # Only the (memory-bound) batch norm slows down, by its bandwidth share: (t - 2 kernels) x 2.
    assert half.fwd[1] - 8e-6 == pytest.approx(2 * (base.fwd[1] - 8e-6))
    assert half.fwd[0] == base.fwd[0] and half.fwd[2] == base.fwd[2]
    # A parameter-free matmul reading query, key and value is an attention core; one reading a
    # single layer (a projection onto tied embeddings) is a plain gemm.
    q, k, v = (Layer(name=n, kind="linear", fwd_flops=1.0, activation_bytes=4.0, variables=(Variable(name=f"{n}.w", shape=(1, 1)),)) for n in "qkv")  # fmt: skip
    core = Layer(name="self", kind="matmul", fwd_flops=1e6, activation_bytes=4096.0, inputs=("q", "k", "v"))
    proj = Layer(name="head", kind="matmul", fwd_flops=1e6, activation_bytes=4096.0, inputs=("self",))
    m = ModelSpec(name="att", batch_size=1, layers=(q, k, v, core, proj))
    assert c.layer_work(m, 1).op_class[3:] == ("attention", "gemm")
