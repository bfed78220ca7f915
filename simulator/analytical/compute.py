"""The compute model: forward and backward seconds of every layer on one device (issue 15).

This is the one statement of compute time. The analytical cost model (T_comp of Eq. 1, via
``formulas.node_compute_times``), the fit, the learned features and the executor's replay
(``runtime.executor.worker.layer_seconds``) all call ``layer_times``, so replayed and predicted
compute agree by construction.

Roofline per layer and pass (forward, backward), for a per-device batch of B samples:

    t = max(F·B / (peak(dtype, class) · eff(class)), (A·B + P − N) / (BW · eff_mem))
        + N / first_touch + K · launch

F: FLOPs per sample; A: activation bytes read + written per sample; P: parameter bytes read or
written once per step; K: kernels launched; peak: the device's TFLOPS for the layer's dtype on
tensor cores (gemm, conv, attention; fp32 / tf32 / fp16 / bf16) or on the vector units (norm,
element-wise, embedding: the FP32 rate); BW: memory bandwidth; launch: the device's per-kernel
host cost; eff: ``OpEfficiency`` per op class and pass (``layer_class``: a parameter-free
attention core is "attention", a 1x1 convolution "gemm", else ``op_class`` of the kind; a
multi-head attention module's projection FLOPs take the gemm share, its core the attention's; the
backward pass takes ``OpEfficiency.backward`` when set), eff_mem its share for the layer's
``memory_key`` (batch norm, other norms, embeddings, the rest). N: bytes written into tensors of
at least ``FRESH_TENSOR_BYTES`` the step allocates anew (outputs, input and parameter gradients),
which a CPU's allocator maps and page-faults in at ``DeviceType.first_touch_gbs`` (None on GPUs,
whose caching allocators reuse memory: N costs nothing extra there). The whole is divided by ``CostParams.efficiency_of(device)``, a per-device
correction the fit estimates from measured runtimes (1.0: the roofline as is).

Backward is derived from the layer's op class, not a blanket 2x:
    gemm, conv, attention  F_b = 2·F (input and weight gradients), F when the layer reads the
                           model input (no input gradient); A_b = 2·A (reads dY, X and W, writes
                           dX); P_b = 2·P (reads W, writes dW); K_b = 2·K (+1 bias reduction)
    norm                   F_b = F, A_b = 1.6·A (batch norm reads X and dY, reduces, writes dX)
    element-wise           A_b = A (add passes dY through; cat slices it; mul multiplies once)
    embedding              F_b = 0; A_b = 2·A (index-add of the looked-up rows); a dense gradient
                           also writes the whole table once: P_b = P (zero-fill + scatter)

When a layer's ``fwd_bytes`` / ``fwd_kernels`` are None (a spec written by hand or by an older
extractor; every zoo file has them, see datasets/README.md), they are estimated from the layer's
kind and activation sizes (``_fallback_bytes``); the extractor fills them from the traced ATen ops.

A measured ``Profile`` for exactly (model, device, dtype, batch) in ``CostParams.profiles``
replaces the roofline for the layers it lists; ``ComputeTimes.source`` says which was used. The
executor's replay passes the session's profiles (by default the model's in the profile store)
to this same function, so a replayed step and the cost model's T_comp take the same profile.

Shapes: L layers. ``LayerWork`` arrays (L,) per batch; ``ComputeTimes.fwd/bwd`` (L,) seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from simulator.spec import DTYPE_BYTES, DeviceType, Layer, ModelSpec

if TYPE_CHECKING:
    from simulator.analytical.params import CostParams

OpClass = Literal["gemm", "conv", "attention", "norm", "elementwise", "embedding"]
OP_CLASSES: tuple[OpClass, ...] = ("gemm", "conv", "attention", "norm", "elementwise", "embedding")
MATRIX_CLASSES = frozenset({"gemm", "conv", "attention"})
ComputeSource = Literal["roofline", "profile", "profile+roofline"]
#: Which bandwidth share a layer's bytes take (``OpEfficiency.memory_of``).
MemoryKey = Literal["memory", "norm", "layernorm", "embedding"]
#: Tensors at least this large are mapped afresh by the host allocator on every step and their
#: first write page-faults (glibc's malloc serves requests above its dynamic mmap threshold,
#: which stops growing at DEFAULT_MMAP_THRESHOLD_MAX = 32 MiB on 64-bit, with mmap and returns
#: them to the OS on free). Costs ``DeviceType.first_touch_gbs``; GPUs' caching allocators don't.
FRESH_TENSOR_BYTES = 32 * 2**20

_KIND_CLASS: dict[str, OpClass] = {
    "linear": "gemm",
    "matmul": "gemm",
    "bilinear": "gemm",
    "lstm": "gemm",
    "gru": "gemm",
    "rnn": "gemm",
    "lstmcell": "gemm",
    "grucell": "gemm",
    "multiheadattention": "attention",
    "attention": "attention",
    # A fused IO-aware attention kernel (FlashAttention / SDPA): its bytes are the spec's fwd_bytes.
    "flash_attention": "attention",
    "embedding": "embedding",
    "embeddingbag": "embedding",
}
#: Bytes of one element of each compute dtype (tf32 keeps float32 storage).
COMPUTE_BYTES = {"float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2}
#: Assumed head width of an attention core whose scores tensor the spec does not record.
HEAD_DIM = 64


def op_class(kind: str) -> OpClass:
    """The roofline class of a layer kind (matched case-insensitively; unknown kinds are element-wise).

    conv* -> conv; *norm* -> norm; linear/matmul/rnn cells -> gemm; attention -> attention;
    embedding -> embedding; add/cat/mul/... and anything else -> elementwise.
    """
    k = kind.lower()
    if k in _KIND_CLASS:
        return _KIND_CLASS[k]
    if k.startswith("conv"):
        return "conv"
    if "norm" in k:
        return "norm"
    return "elementwise"


def layer_class(layer: Layer) -> OpClass:
    """The roofline class of one layer: ``op_class`` of its kind, except that a parameter-free
    attention core (``looks_like_attention``) is "attention" and a convolution whose kernel is
    1x1 is "gemm" (it is one matrix product over the pixels: cuDNN runs it as an implicit GEMM
    and ATen on a CPU as a plain GEMM, at the GEMM rate rather than a spatial convolution's)."""
    if looks_like_attention(layer):
        return "attention"
    cls = op_class(layer.kind)
    if cls == "conv" and layer.variables:
        w = layer.variables[0].shape
        if len(w) >= 3 and all(k == 1 for k in w[2:]):
            return "gemm"
    return cls


def memory_key(layer: Layer, cls: OpClass) -> MemoryKey:
    """Which bandwidth share bounds the layer's bytes: batch norm, other norms, embeddings, the rest."""
    if cls == "norm":
        return "norm" if layer.kind.lower().startswith("batchnorm") else "layernorm"
    if cls == "embedding":
        return "embedding"
    return "memory"


@dataclass(frozen=True)
class OpEfficiency:
    """Fraction of the roofline's ceilings each op class reaches (CostParams.op_efficiency).

    Defaults are typical cuBLAS/cuDNN figures for large training shapes (dense GEMMs reach 70-80%
    of tensor-core peak, convolutions 50-60%, attention with its softmax ~50%) and ~80% of peak
    bandwidth for streaming kernels. ``simulator.profile.calibrate`` measures them on a device
    from one micro-layer per class (``benchmarks/compute_model.py`` reports how they hold on the
    zoo's models, none of which is used to fit them).
    """

    gemm: float = 0.70
    conv: float = 0.55
    attention: float = 0.50
    # Norm / element-wise / embedding arithmetic on the vector units (rarely the bound).
    vector: float = 0.50
    # Fraction of memory bandwidth streaming kernels reach (element-wise ops, and the matrix
    # classes when their bytes are the bound).
    memory: float = 0.80
    # Fraction of memory bandwidth batch norm reaches (its statistics reductions stream less well
    # than an element-wise op on a CPU; on GPUs about as well).
    norm: float = 0.80
    # Fraction of memory bandwidth layer / group / RMS norms reach; None: ``norm``.
    layernorm: float | None = None
    # Fraction of memory bandwidth embedding gathers and their gradient scatter reach; None: ``memory``.
    embedding: float | None = None
    # The backward pass's own fractions (its kernels differ: a convolution's weight gradient,
    # batch norm's fused backward); None: the forward's.
    backward: OpEfficiency | None = None

    def __post_init__(self) -> None:
        for name in ("gemm", "conv", "attention", "vector", "memory", "norm", "layernorm", "embedding"):
            v = getattr(self, name)
            if v is not None and not 0 < v <= 1:
                raise ValueError(f"op_efficiency.{name}: must be in (0, 1], got {v}")
        if self.backward is not None and self.backward.backward is not None:
            raise ValueError("op_efficiency.backward: must not have a backward of its own")

    def of(self, cls: OpClass) -> float:
        """The FLOP share of ``cls``."""
        if cls == "gemm":
            return self.gemm
        if cls == "conv":
            return self.conv
        if cls == "attention":
            return self.attention
        return self.vector

    def memory_of(self, key: MemoryKey) -> float:
        """The bandwidth share of a layer whose bytes are its bound (``memory_key``)."""
        if key == "norm":
            return self.norm
        if key == "layernorm":
            return self.norm if self.layernorm is None else self.layernorm
        if key == "embedding":
            return self.memory if self.embedding is None else self.embedding
        return self.memory

    def pass_(self, p: int) -> OpEfficiency:
        """The shares of pass ``p`` (0 forward, 1 backward)."""
        return self.backward if p == 1 and self.backward is not None else self


@dataclass(frozen=True, eq=False)
class LayerWork:
    """Device-independent work of one step, per layer, for a whole per-device batch.

    Shapes: L layers. flops/bytes/kernels/fresh (2, L): row 0 forward, row 1 backward; bytes
    include parameter traffic; fresh: bytes written into tensors of at least
    ``FRESH_TENSOR_BYTES`` the step allocates anew (outputs, input and parameter gradients).
    matrix (L,) bool: on tensor cores; dtype (L,) compute dtype names; op_class (L,) class names;
    memory_key (L,) bandwidth-share names; gemm_part (L,) the share of an attention layer's
    FLOPs that are its projections' plain GEMMs (``_projection_part``), 0 for every other layer.
    """

    flops: np.ndarray
    bytes: np.ndarray
    kernels: np.ndarray
    fresh: np.ndarray
    matrix: np.ndarray
    dtype: tuple[str, ...]
    op_class: tuple[OpClass, ...]
    memory_key: tuple[MemoryKey, ...]
    gemm_part: np.ndarray


@dataclass(frozen=True, eq=False)
class ComputeTimes:
    """Seconds of every layer's forward and backward on one device; which model produced them.

    Shapes: fwd, bwd (L,) seconds for the batch.
    """

    fwd: np.ndarray
    bwd: np.ndarray
    source: ComputeSource
    profiled_layers: int

    @property
    def step(self) -> float:
        """Forward + backward seconds of the whole model (one training step's compute)."""
        return float(self.fwd.sum() + self.bwd.sum())


def model_dtype(model: ModelSpec, override: str | None = None) -> str:
    """The compute dtype a model runs in: override, else ``compute_dtype``, else its parameters'."""
    if override is not None:
        return override
    if model.compute_dtype is not None:
        return model.compute_dtype
    return _param_dtype(model)


def _param_dtype(model: ModelSpec) -> str:
    """The dtype of the first floating-point parameter (what activations were traced in)."""
    for v in model.variables:
        if v.dtype in ("float32", "float16", "bfloat16"):
            return v.dtype
    return "float32"


def layer_work(model: ModelSpec, batch: int, dtype: str | None = None) -> LayerWork:
    """Forward/backward FLOPs, bytes and kernels of every layer for ``batch`` samples (cached)."""
    key = (id(model), batch, dtype)
    hit = _WORK_CACHE.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    work = _layer_work(model, batch, dtype)
    if len(_WORK_CACHE) >= 64:
        _WORK_CACHE.clear()
    _WORK_CACHE[key] = (model, work)
    return work


_WORK_CACHE: dict[tuple[int, int, str | None], tuple[ModelSpec, LayerWork]] = {}


def _layer_work(model: ModelSpec, batch: int, override: str | None) -> LayerWork:
    n = len(model.layers)
    flops = np.zeros((2, n))
    nbytes = np.zeros((2, n))
    kernels = np.zeros((2, n))
    fresh = np.zeros((2, n))
    gemm_part = np.zeros(n)
    matrix = np.zeros(n, dtype=bool)
    traced = DTYPE_BYTES[_param_dtype(model)]
    by_name = {layer.name: layer for layer in model.layers}
    dtypes: list[str] = []
    classes: list[OpClass] = []
    keys: list[MemoryKey] = []
    for i, layer in enumerate(model.layers):
        cls = layer_class(layer)
        dt = override or model.compute_dtype or _layer_param_dtype(layer) or _param_dtype(model)
        scale = COMPUTE_BYTES[dt] / traced
        given = layer.fwd_bytes
        act = (given if given is not None else _fallback_bytes(layer, cls, by_name, traced)) * scale
        k_fwd = float(layer.fwd_kernels if layer.fwd_kernels is not None else _fallback_kernels(layer, cls))
        params = sum(v.bytes for v in layer.variables) * scale
        dense_params = sum(v.bytes for v in layer.variables if not v.sparse) * scale
        f = layer.fwd_flops * batch
        has_bias = any(len(v.shape) == 1 for v in layer.variables)
        if cls in MATRIX_CLASSES:
            needs_dx = bool(layer.inputs)
            flops[:, i] = (f, f * (2.0 if needs_dx else 1.0))
            nbytes[:, i] = (act * batch + params, act * batch * (2.0 if needs_dx else 1.0) + 2 * params)
            kernels[:, i] = (k_fwd, k_fwd * (2.0 if needs_dx else 1.0) + (1.0 if has_bias else 0.0))
        elif cls == "norm":
            flops[:, i] = (f, f)
            nbytes[:, i] = (act * batch + params, 1.6 * act * batch + 2 * params)
            kernels[:, i] = (k_fwd, k_fwd)
        elif cls == "embedding":
            flops[:, i] = (f, 0.0)
            nbytes[:, i] = (act * batch, 2 * act * batch + dense_params)
            kernels[:, i] = (k_fwd, 2 * k_fwd)
        else:
            flops[:, i] = (f, f)
            nbytes[:, i] = (act * batch + params, act * batch + 2 * params)
            kernels[:, i] = (k_fwd, k_fwd)
        fresh[:, i] = _fresh_bytes(layer, cls, by_name, batch, scale)
        gemm_part[i] = _projection_part(layer, traced) if cls == "attention" else 0.0
        matrix[i] = cls in MATRIX_CLASSES
        dtypes.append(dt)
        classes.append(cls)
        keys.append(memory_key(layer, cls))
    return LayerWork(
        flops, nbytes, kernels, fresh, matrix, tuple(dtypes), tuple(classes), tuple(keys), gemm_part
    )


def _projection_part(layer: Layer, elem: int) -> float:
    """Share of an attention layer's forward FLOPs in its input/output projections (plain GEMMs).

    A multi-head attention module owns its projection weights (in_proj (3E, E), out_proj (E, E)):
    tokens per sample T = activation_bytes / (elem·E), projections 2·T·(weights' elements); the
    rest (QK^T, AV) is the attention core. A parameter-free core has none (0).
    """
    mats = [v for v in layer.variables if len(v.shape) == 2]
    if not mats or layer.fwd_flops <= 0:
        return 0.0
    width = mats[-1].shape[0]
    tokens = layer.activation_bytes / (elem * width)
    proj = 2.0 * tokens * sum(v.numel for v in mats)
    return min(1.0, proj / layer.fwd_flops)


def _fresh_bytes(
    layer: Layer, cls: OpClass, by_name: dict[str, Layer], batch: int, scale: float
) -> tuple[float, float]:
    """Bytes (forward, backward) written into tensors of >= FRESH_TENSOR_BYTES made this step.

    Forward: the output. Backward: the input gradients of layers that make new ones (matrix
    classes, norms, reading another layer) and every dense parameter gradient (reset to None
    between steps, ``zero_grad``'s default, so made anew each step).
    """

    def big(nbytes: float) -> float:
        return nbytes if nbytes >= FRESH_TENSOR_BYTES else 0.0

    fwd = big(layer.activation_bytes * batch * scale)
    bwd = sum(big(v.bytes * scale) for v in layer.variables if not v.sparse)
    if layer.inputs and (cls in MATRIX_CLASSES or cls == "norm"):
        bwd += sum(big(by_name[s].activation_bytes * batch * scale) for s in layer.inputs)
    return fwd, bwd


def _layer_param_dtype(layer: Layer) -> str | None:
    for v in layer.variables:
        if v.dtype in ("float32", "float16", "bfloat16"):
            return v.dtype
    return None


def _fallback_bytes(layer: Layer, cls: OpClass, by_name: dict[str, Layer], elem: int) -> float:
    """Forward activation bytes per sample estimated from kind and activation sizes (zoo files).

    out = the layer's ``activation_bytes``; in = the sum of its inputs' (out when it reads the
    model input). The folded ops the extractor merged away are added where the zoo's models put
    them: the ReLU after every batch norm (read + write), and the softmax + dropout on the
    attention scores (heads·S² elements, heads = width / HEAD_DIM, S from the attention FLOPs
    4·S²·width) of an attention core (``looks_like_attention``).
        gemm / conv / attention: in + out        norm: in + out (+2·out batch norm: ReLU)
        element-wise: in + out                   embedding: 2·out (gather rows, write them)
    """
    out = layer.activation_bytes
    inp = sum(by_name[s].activation_bytes for s in layer.inputs) if layer.inputs else out
    if cls == "embedding":
        return 2.0 * out
    total = inp + out
    kind = layer.kind.lower()
    if cls == "norm" and kind.startswith("batchnorm"):
        total += 2.0 * out + inp  # statistics pass over the input, then the ReLU after it
    if looks_like_attention(layer) and out > 0 and layer.fwd_flops > 0:
        seq = layer.fwd_flops / (4.0 * out / elem)  # FLOPs = 4·S·(S·width); out = S·width·elem bytes
        scores = seq * out / HEAD_DIM  # heads·S²·elem bytes = S·out/HEAD_DIM
        total += 7.0 * scores  # written and read by both matmuls, softmax r+w, dropout r+w+mask
    return total


def looks_like_attention(layer: Layer) -> bool:
    """A parameter-free ``matmul`` layer that is an attention core (QK^T, softmax, AV), not a plain
    product such as an output projection onto tied embeddings: it reads two or more layers (query,
    key, value) or its name says attention ('attn', 'attention')."""
    if layer.kind.lower() != "matmul" or layer.variables:
        return False
    name = layer.name.lower()
    return len(layer.inputs) >= 2 or "attn" in name or "attention" in name


def _fallback_kernels(layer: Layer, cls: OpClass) -> int:
    """Forward kernels by kind: one per op, plus the folded ReLU / softmax / dropout noted above."""
    kind = layer.kind.lower()
    if looks_like_attention(layer):
        return 4  # QK^T, softmax, dropout, AV
    if cls == "attention":
        return 10  # in-projection, split, QK^T, softmax, dropout, AV, out-projection, reshapes
    if cls == "norm" and kind.startswith("batchnorm"):
        return 2  # batch norm, ReLU
    return 1


def peak_flops(device: DeviceType, dtype: str, matrix: bool) -> float:
    """FLOP/s ceiling: tensor-core peak for the dtype on matrix ops, else the FP32 vector rate.

    tf32 and bf16 fall back to the FP32 rate on devices without that path (None in the spec).
    """
    if not matrix or dtype == "float32":
        return device.fp32_tflops * 1e12
    if dtype == "tf32":
        return (device.tf32_tflops or device.fp32_tflops) * 1e12
    if dtype == "bfloat16":
        return (device.bf16_tflops or device.fp32_tflops) * 1e12
    return device.fp16_tflops * 1e12


def roofline(work: LayerWork, device: DeviceType, params: CostParams) -> np.ndarray:
    """Seconds (2, L) of every layer's forward (row 0) and backward (row 1) on ``device``."""
    t = np.zeros_like(work.flops)
    for p in (0, 1):
        eff = params.op_efficiency.pass_(p)
        # An attention layer's projections run at the GEMM share, its core at the attention share.
        ceiling = np.array(
            [
                peak_flops(device, dt, bool(m)) / (g / eff.gemm + (1.0 - g) / eff.of(c))
                for dt, m, c, g in zip(work.dtype, work.matrix, work.op_class, work.gemm_part, strict=True)
            ]
        )
        bw = device.memory_bw_gbs * 1e9 * np.array([eff.memory_of(k) for k in work.memory_key])
        nbytes = work.bytes[p]
        if device.first_touch_gbs is not None:  # fresh tensors are written at the first-touch rate
            nbytes = np.maximum(nbytes - work.fresh[p], 0.0)
            t[p] = work.fresh[p] / (device.first_touch_gbs * 1e9)
        t[p] += np.maximum(work.flops[p] / ceiling, nbytes / bw)
    t += work.kernels * device.launch_overhead_us * 1e-6
    return t / params.efficiency_of(device.name)


def layer_times(model: ModelSpec, device: DeviceType, batch: int, params: CostParams) -> ComputeTimes:
    """Forward and backward seconds of every layer of ``model`` on ``device`` for ``batch`` samples.

    A profile for (model, device, dtype, batch) in ``params.profiles`` gives the layers it lists
    (not divided by the device correction: it is a measurement); the roofline gives the rest.
    """
    if batch < 1:
        raise ValueError(f"batch: must be >= 1, got {batch}")
    dtype = model_dtype(model, params.compute_dtype)
    t = roofline(layer_work(model, batch, params.compute_dtype), device, params)
    fwd, bwd = t[0].copy(), t[1].copy()
    profile = params.profile_for(model.name, device.name, dtype, batch)
    if profile is None:
        return ComputeTimes(fwd, bwd, "roofline", 0)
    measured = profile.times()
    hits = 0
    for i, layer in enumerate(model.layers):
        m = measured.get(layer.name)
        if m is not None:
            fwd[i], bwd[i] = m
            hits += 1
    source: ComputeSource = "profile" if hits == len(model.layers) else "profile+roofline"
    return ComputeTimes(fwd, bwd, source if hits else "roofline", hits)


def step_seconds(model: ModelSpec, device: DeviceType, batch: int, params: CostParams) -> float:
    """One step's forward + backward seconds (``layer_times(...).step``)."""
    return layer_times(model, device, batch, params).step
