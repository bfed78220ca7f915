"""Calibrate a DeviceType and per-op-class efficiencies on the local device (issue 15).

``calibration_times`` measures, with no zoo model involved, what the roofline
(``simulator.analytical.compute``) needs, and ``calibration_from`` turns those seconds into a
``Calibration``:

1. the FP32 ceiling: the best rate of square matmuls (512, 1024) and of a 3x3 convolution's
   forward (on CPUs oneDNN's direct convolution can beat the BLAS GEMM, e.g. MKL on AMD);
2. memory bandwidth: copying a 64 MB tensor into another (read + write);
3. first-touch bandwidth (CPU only): ``torch.zeros`` of 64 MB, which the allocator maps anew and
   page-faults in (``DeviceType.first_touch_gbs``; ``compute.FRESH_TENSOR_BYTES``), measured
   first, before anything else has mapped or freed memory in the process;
4. per-op overhead: a chain of one-element ops run forward and backward (dispatch + autograd);
5. micro-layers, each built as a ``ModelSpec`` and run as layer replicas (``replica.build_replicas``:
   the same ops the class stands for), forward and backward timed apart; each pass's share of the
   bound the roofline puts on it (``compute.layer_work`` with every share 1) is

       share = t_bound / (t_measured - kernels · launch)

   and a class's efficiency per pass is the geometric mean of its micro-layers' shares
   (``MICRO_LAYERS``: gemm on two Linear and two 1x1-convolution shapes, since the roofline runs
   1x1 convolutions at the GEMM share; 3x3 convolutions at two (channels, side) points of a CNN's
   ladder; an attention core; batch norm + ReLU on a tensor that fits the caches and one that
   does not; layer norm; an embedding gather; an element-wise add).

Decision: the shapes are generic training shapes (the channel/width ladders of CNNs and
transformer blocks), fixed here and never read from the models the benchmark reports, and nothing
is fitted to a model's measurement. One shape per class over-stated what models reach by 10-25 %
(a 1x1 convolution runs below a square Linear's rate on oneDNN; a batch norm beyond the L2 cache
below one inside it). A share above 1 (the byte count over-states the traffic, e.g. caches) is
clipped to 1: a share stays a fraction of a ceiling.

Protocol (the benchmark's models are timed the same way): one warm-up round, then ``repeats``
rounds in which every micro-benchmark runs once, interleaved, so a burst of host load slows one
sample of each rather than every sample of one; each figure is the fastest of its ``repeats``
samples (the least-disturbed run on a shared host, as ``time_passes(..., min)`` for a model).
Torch runs on the calling thread's clock (``measure.clock_for``). ``merge_times`` takes the median
of several processes' times, key by key: ``benchmarks/compute_model.py`` calibrates in fresh
processes interleaved with the models it measures, so the calibration sees the host load the
models saw rather than that of one moment at start.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from simulator.analytical.compute import FRESH_TENSOR_BYTES, OpEfficiency, layer_work
from simulator.profile.measure import clock_for, time_passes
from simulator.profile.replica import build_replicas
from simulator.spec import DeviceType, Layer, ModelSpec, Variable

BATCH = 2
CLASS_KEYS = ("gemm", "conv", "attention", "norm", "layernorm", "embedding", "memory")
_MEMORY_BOUND = {"norm", "layernorm", "embedding", "memory"}
_PEAK_KEYS = ("matmul512", "matmul1024", "conv3x3")
_CONV_PEAK = (64, 56)  # channels, side of the 3x3 convolution the ceiling is measured on


@dataclass(frozen=True)
class ClassFit:
    """One micro-layer: its name ('<class key>:<shape>'), measured and bound seconds per pass, the
    shares fitted."""

    key: str
    measured: tuple[float, float]
    bound: tuple[float, float]
    share: tuple[float, float]

    @property
    def cls(self) -> str:
        """The class key (gemm, conv, attention, norm, layernorm, embedding, memory)."""
        return self.key.split(":", 1)[0]


@dataclass(frozen=True)
class Calibration:
    """A calibrated device, its efficiencies and the micro-layer fits they came from."""

    device: DeviceType
    efficiency: OpEfficiency
    fits: tuple[ClassFit, ...]


def best_time(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """The fastest of ``repeats`` runs after a warm-up (synchronised on CUDA)."""
    clock = clock_for(device)
    fn()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = clock()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append(clock() - t0)
    return min(out)


def _first_touch_s(nbytes: int, repeats: int) -> float:
    """Seconds of ``torch.zeros`` of ``nbytes`` (mapped anew, page-faulted in): the median of
    ``repeats``, its free outside the clock: as a training step's new gradient, freed by the next
    step's ``zero_grad``, and as the measurement protocol (``measure.time_passes``) resets
    gradients outside the clock. The median, not the fastest: a run that finds the pages still
    mapped measures a memset, not the page faults every step of a training process pays."""
    clock = clock_for(torch.device("cpu"))
    out = []
    for _ in range(repeats):
        t0 = clock()
        x = torch.zeros(nbytes // 4)
        out.append(clock() - t0)
        del x
    return statistics.median(out)


def _var(name: str, *shape: int) -> Variable:
    return Variable(name=name, shape=shape)


def _layer(
    name: str, kind: str, flops: float, out: float, *variables: Variable, inputs: tuple[str, ...] = ()
) -> Layer:
    return Layer(
        name=name, kind=kind, fwd_flops=flops, activation_bytes=out, variables=variables, inputs=inputs
    )


def _after(key: str, src_bytes: float, layer: Layer, *more: float) -> ModelSpec:
    """Source layers giving the input sizes, then the layer calibrated (the last)."""
    srcs = [
        _layer(f"src{i}", "identity", 0.0, b, _var(f"src{i}.w", 1)) for i, b in enumerate((src_bytes, *more))
    ]
    last = layer.model_copy(update={"inputs": tuple(s.name for s in srcs)})
    return ModelSpec(name=f"calibration-{key}", batch_size=BATCH, layers=(*srcs, last))


def _linear(key: str, rows: int, n_in: int, n_out: int) -> ModelSpec:
    lin = _layer(
        key, "linear", 2.0 * rows * n_in * n_out, 4.0 * rows * n_out, _var("w", n_out, n_in), _var("b", n_out)
    )
    return _after(key, 4.0 * rows * n_in, lin)


def _conv(key: str, c_in: int, c_out: int, k: int, side: int) -> ModelSpec:
    pixels = side * side
    conv = _layer(
        key, "conv2d", 2.0 * c_in * c_out * k * k * pixels, 4.0 * c_out * pixels, _var("w", c_out, c_in, k, k)
    )
    return _after(key, 4.0 * c_in * pixels, conv)


def _batchnorm(key: str, channels: int, side: int) -> ModelSpec:
    out = 4.0 * channels * side * side
    return _after(key, out, _layer(key, "batchnorm2d", 0.0, out, _var("g", channels), _var("b", channels)))


def micro_layers() -> dict[str, ModelSpec]:
    """One two- or three-layer spec per micro-layer, named '<class key>:<shape>' (module
    docstring): source layers giving the input sizes, then the layer calibrated (the last). Bytes
    are float32 per sample."""
    seq, width = 128, 768
    specs = [
        _linear("gemm:linear-256x1024x1024", 256, 1024, 1024),
        _linear("gemm:linear-128x768x3072", 128, 768, 3072),
        _conv("gemm:conv1x1-64x256@56", 64, 256, 1, 56),
        _conv("gemm:conv1x1-512x128@28", 512, 128, 1, 28),
        _conv("conv:3x3-64@56", 64, 64, 3, 56),
        _conv("conv:3x3-256@14", 256, 256, 3, 14),
        _after(
            "attention:128x768",
            seq * width * 4,
            _layer("attention:128x768", "matmul", 4 * seq * seq * width, seq * width * 4),
            seq * width * 4,
        ),
        _batchnorm("norm:bn-64@56", 64, 56),
        _batchnorm("norm:bn-256@56", 256, 56),
        _after(
            "layernorm:256x1024",
            256 * 1024 * 4,
            _layer("layernorm:256x1024", "layernorm", 0.0, 256 * 1024 * 4, _var("g", 1024), _var("b", 1024)),
        ),
        _after(
            "embedding:128-of-8192x256",
            4.0,
            _layer("embedding:128-of-8192x256", "embedding", 0.0, 128 * 256 * 4, _var("w", 8192, 256)),
        ),
        _after("memory:add-2M", 2**21 * 4, _layer("memory:add-2M", "add", 0.0, 2**21 * 4), 2**21 * 4),
    ]
    return {s.name.removeprefix("calibration-"): s for s in specs}


def _fit(key: str, spec: ModelSpec, device: DeviceType, measured: tuple[float, float]) -> ClassFit:
    work = layer_work(spec, BATCH, "float32")
    i = len(spec.layers) - 1
    launch = device.launch_overhead_us * 1e-6
    cls = key.split(":", 1)[0]
    bound: list[float] = []
    share: list[float] = []
    for p in (0, 1):
        if cls in _MEMORY_BOUND:
            t = float(work.bytes[p, i]) / (device.memory_bw_gbs * 1e9)
        else:
            t = float(work.flops[p, i]) / (device.fp32_tflops * 1e12)
        rest = max(measured[p] - float(work.kernels[p, i]) * launch, 1e-9)
        bound.append(t)
        share.append(min(1.0, max(1e-3, t / rest)))
    return ClassFit(key, measured, (bound[0], bound[1]), (share[0], share[1]))


def _matmul(a: torch.Tensor, b: torch.Tensor) -> Callable[[], object]:
    return lambda: a @ b


def calibration_times(device: torch.device, repeats: int = 3) -> dict[str, float]:
    """Seconds of every micro-benchmark on ``device`` (module docstring: interleaved rounds, the
    fastest of ``repeats``); keys: matmul512, matmul1024, conv3x3 (forward), copy (64 MB),
    first_touch (64 MB, CPU only), op (one recorded op forward + its backward node), and
    '<micro-layer>/fwd', '<micro-layer>/bwd' for every ``micro_layers`` entry."""
    out: dict[str, list[float]] = {}
    if device.type == "cpu":
        out["first_touch"] = [_first_touch_s(2 * FRESH_TENSOR_BYTES, 2 * repeats + 1)]
    benches: dict[str, Callable[[], object]] = {}
    for n in (512, 1024):
        benches[f"matmul{n}"] = _matmul(torch.randn(n, n, device=device), torch.randn(n, n, device=device))
    c, side = _CONV_PEAK
    x = torch.randn(BATCH, c, side, side, device=device)
    conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False).to(device)

    def conv_fwd() -> None:
        with torch.no_grad():
            conv(x)

    benches["conv3x3"] = conv_fwd
    big = torch.randn(16 * 2**20, device=device)  # 64 MB, beyond any cache
    dst = torch.empty_like(big)
    benches["copy"] = lambda: dst.copy_(big)
    tiny = torch.ones(1, device=device, requires_grad=True)

    def chain() -> None:  # 200 recorded ops forward, then their 200 backward nodes
        y = tiny
        for _ in range(200):
            y = y * 1.0
        y.backward()

    benches["op"] = chain
    layers = {key: build_replicas(spec, BATCH, device)[-1] for key, spec in micro_layers().items()}
    for _ in range(repeats):
        for key, fn in benches.items():
            out.setdefault(key, []).append(best_time(fn, 1, device) / (400 if key == "op" else 1))
        for key, r in layers.items():
            t = time_passes(r.run, r.leaves, device, 1, min)
            out.setdefault(f"{key}/fwd", []).append(t.fwd_s)
            out.setdefault(f"{key}/bwd", []).append(t.bwd_s)
    return {k: min(v) for k, v in out.items()}


def merge_times(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The median over ``runs`` (``calibration_times`` of several processes), key by key."""
    if not runs:
        raise ValueError("runs: at least one calibration is needed")
    keys = set(runs[0])
    return {k: statistics.median(r[k] for r in runs) for k in sorted(keys)}


def calibration_from(times: Mapping[str, float], device_type: str, threads: int | None = None) -> Calibration:
    """The Calibration ``times`` (``calibration_times``' keys) stand for; the DeviceType is named
    '<device_type>-calibrated'."""
    c, side = _CONV_PEAK
    work = {
        "matmul512": 2 * 512**3,
        "matmul1024": 2 * 1024**3,
        "conv3x3": 2 * BATCH * c * c * 9 * side * side,
    }
    peak = max(work[k] / times[k] for k in _PEAK_KEYS)
    bw = 2 * 16 * 2**20 * 4 / times["copy"]
    first_touch = 2 * FRESH_TENSOR_BYTES / times["first_touch"] if "first_touch" in times else None
    where = f"{device_type}" + (f" with {threads} torch threads" if threads else "")
    dt = DeviceType(
        name=f"{device_type}-calibrated",
        fp32_tflops=peak / 1e12,
        fp16_tflops=peak / 1e12,
        memory_gb=64,
        memory_bw_gbs=bw / 1e9,
        launch_overhead_us=times["op"] * 1e6,
        first_touch_gbs=first_touch / 1e9 if first_touch is not None else None,
        source=f"micro-benchmarks on {where}",
    )
    fits = [
        _fit(key, spec, dt, (times[f"{key}/fwd"], times[f"{key}/bwd"]))
        for key, spec in micro_layers().items()
    ]
    return Calibration(dt, efficiency_of(fits), tuple(fits))


def calibrate_device(device: torch.device, repeats: int = 3) -> Calibration:
    """Measure this device in this process (``calibration_times``, ``calibration_from``)."""
    threads = torch.get_num_threads() if device.type == "cpu" else None
    return calibration_from(calibration_times(device, repeats), device.type, threads)


def efficiency_of(fits: Sequence[ClassFit]) -> OpEfficiency:
    """OpEfficiency (forward, with ``backward``) from the micro-layer fits: per class and pass the
    geometric mean of its micro-layers' shares; arithmetic on the vector units never binds in the
    roofline's classes here (share 1)."""
    by: dict[str, list[tuple[float, float]]] = {}
    for f in fits:
        by.setdefault(f.cls, []).append(f.share)
    missing = [k for k in CLASS_KEYS if k not in by]
    if missing:
        raise ValueError(f"fits: no micro-layer of class {', '.join(missing)}")

    def share(cls: str, p: int) -> float:
        return math.exp(statistics.fmean(math.log(s[p]) for s in by[cls]))

    def of(p: int) -> OpEfficiency:
        return OpEfficiency(
            gemm=share("gemm", p),
            conv=share("conv", p),
            attention=share("attention", p),
            vector=1.0,
            memory=share("memory", p),
            norm=share("norm", p),
            layernorm=share("layernorm", p),
            embedding=share("embedding", p),
        )

    return replace(of(0), backward=of(1))


@dataclass(frozen=True)
class ModelScales:
    """Two corrections fitted on whole models measured on the device (``fit_scales``).

    matrix: multiplies the gemm, conv and attention shares (whole models reach less of the
    micro-layers' rates: weights and activations come cold from memory, shapes are smaller and
    odder); launch: multiplies the per-op overhead (``fit_scales`` leaves it at 1).
    """

    matrix: float = 1.0
    launch: float = 1.0

    def apply(self, cal: Calibration) -> tuple[DeviceType, OpEfficiency]:
        """The calibrated device and efficiencies with these corrections (shares capped at 1)."""

        def scaled(e: OpEfficiency) -> OpEfficiency:
            k = self.matrix
            return replace(
                e,
                gemm=min(1.0, e.gemm * k),
                conv=min(1.0, e.conv * k),
                attention=min(1.0, e.attention * k),
                backward=None,
            )

        eff = cal.efficiency
        bwd = eff.backward or eff
        out = replace(scaled(eff), backward=scaled(bwd))
        dev = cal.device.model_copy(
            update={"launch_overhead_us": cal.device.launch_overhead_us * self.launch}
        )
        return dev, out


def fit_scales(cal: Calibration, samples: list[tuple[ModelSpec, int, float]]) -> ModelScales:
    """``ModelScales.matrix`` minimising the log ratio of predicted to measured fwd+bwd seconds over
    ``samples`` (model, batch, measured seconds) in float32, with a robust soft-L1 loss (one odd
    measurement does not pull it); ``launch`` stays as micro-benchmarked.

    Decision: one parameter only. A per-op overhead scale fitted beside it is decided by the one or
    two models whose time is mostly dispatch, and swung from 0.05x to 1.9x between leave-one-out
    folds on the CPU benchmark.
    """
    import numpy as np
    from scipy.optimize import least_squares

    from simulator.analytical import CostParams
    from simulator.analytical.compute import layer_times

    def residuals(x: np.ndarray) -> np.ndarray:
        dev, eff = ModelScales(float(np.exp(x[0]))).apply(cal)
        params = CostParams(op_efficiency=eff, compute_dtype="float32")
        return np.array([np.log(layer_times(m, dev, b, params).step / t) for m, b, t in samples])

    fit = least_squares(residuals, np.zeros(1), loss="soft_l1", f_scale=0.2, bounds=([-3], [3]))
    return ModelScales(float(np.exp(fit.x[0])))


__all__ = [
    "CLASS_KEYS",
    "Calibration",
    "ClassFit",
    "ModelScales",
    "best_time",
    "calibrate_device",
    "calibration_from",
    "calibration_times",
    "efficiency_of",
    "fit_scales",
    "merge_times",
    "micro_layers",
]
