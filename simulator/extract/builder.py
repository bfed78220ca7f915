"""Turn a traced forward pass (segments) into a ModelSpec: fold trivial segments, name and type layers.

Rules (documented in datasets/README.md, "Model import"):

- A segment becomes a Layer when it owns a parameter, has non-zero FLOPs, or joins the outputs
  of two or more layers (a residual add, a concatenation: kept as a zero-FLOP ``add``/``cat``
  layer so the DAG stays sparse instead of fanning every earlier layer into every later one).
  Other segments (activations, pooling, reshapes, dropout: 0 FLOPs under torch's counter) are
  folded: their consumers take their inputs, so the DAG keeps every data path between layers.
- A layer is named after the module that issued its ops ('root' for the model itself); a module
  that issues several segments (called twice, or with ops around its children's calls) gives
  ``name#2``, ``name#3``, ... in forward order.
- Its kind is the module class in lower case when the module is a leaf or owns parameters
  directly (``linear``, ``conv2d``, ``embedding``, ``layernorm``, ``multiheadattention``; the
  transformers ``Conv1D``, a transposed linear, is ``linear``); otherwise the op carrying most of
  its FLOPs (``matmul`` for mm/bmm, ``attention`` for fused attention, ``linear`` for addmm).
- FLOPs and activation bytes are per sample: the traced batch's totals divided by its size.
  Activation bytes are the bytes of the layer's output tensors that another layer (or folded
  segment) reads, or that the model returns; outputs of folded segments are not counted.
- Roofline inputs: a layer's ``fwd_bytes`` / ``fwd_kernels`` are its ops' activation bytes read
  + written and kernel launches, per sample, plus those of the folded segments that follow it
  (``_roofline_work``).
- A parameter belongs to the layer that reads it first; it is sparse (``Variable.sparse``) when
  ``sparse_embeddings`` is on and every op that reads it is an embedding lookup. Its expected
  density is the expected fraction of distinct rows that ``n = batch_size * lookups_per_sample``
  uniform lookups touch: ``1 - (1 - 1/rows)^n`` (never more than ``min(1, n/rows)``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from simulator.extract.tracer import EMBEDDING_OPS, Segment, Trace
from simulator.spec import Layer, ModelSpec, Variable

_OP_KINDS = {
    "aten.mm": "matmul",
    "aten.bmm": "matmul",
    "aten.baddbmm": "matmul",
    "aten.addmm": "linear",
    "aten.convolution": "conv",
    "aten._scaled_dot_product": "attention",
}
_JOIN_OPS = ("add", "cat", "mul", "sub", "stack", "where")
_DTYPES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
}


@dataclass(frozen=True)
class BuildOptions:
    """How a trace becomes a ModelSpec."""

    name: str  # ModelSpec.name
    batch_size: int  # default per-GPU batch size (samples) the spec carries
    trace_batch: int  # samples in the traced forward pass (FLOPs and bytes are divided by it)
    family: str = ""  # task family: IC, MT, CF, LM, ...
    source: str = ""  # where the model came from (module, variant), for ModelSpec.source
    sparse_embeddings: bool = True  # embedding-only parameters get sparse gradients


def embedding_density(rows: int, lookups: float) -> float:
    """Expected fraction of ``rows`` touched by ``lookups`` uniform draws: 1 - (1 - 1/rows)^n."""
    if rows <= 1 or lookups >= rows * 50:
        return 1.0
    density = -math.expm1(lookups * math.log1p(-1.0 / rows))
    return min(1.0, max(density, 1e-12))


def _kind(seg: Segment) -> str:
    module = seg.module
    owns = any(True for _ in module.parameters(recurse=False))
    if owns or not any(True for _ in module.children()):
        cls = type(module)
        if cls.__name__ == "Conv1D" and cls.__module__.startswith("transformers"):
            return "linear"
        return cls.__name__.lower()
    if not seg.op_flops:
        for op in seg.ops:
            name = op.split(".")[1] if "." in op else op
            if name.rstrip("_") in _JOIN_OPS:
                return name.rstrip("_")
        return "op"
    op = max(seg.op_flops, key=lambda k: seg.op_flops[k])
    for prefix, kind in _OP_KINDS.items():
        if op.startswith(prefix):
            return kind
    return op.split(".")[1] if "." in op else op


def _variable(trace: Trace, name: str, opts: BuildOptions) -> Variable:
    p = trace.params[name]
    if p.dtype not in _DTYPES:
        raise ValueError(f"parameter {name!r}: unsupported dtype {p.dtype}")
    ops = trace.param_ops.get(name, set())
    sparse = opts.sparse_embeddings and bool(ops) and ops <= EMBEDDING_OPS and p.dim() == 2
    density = 1.0
    if sparse:
        per_sample = trace.lookups.get(name, 0) / opts.trace_batch
        density = embedding_density(p.shape[0], per_sample * opts.batch_size)
    return Variable(name=name, shape=tuple(p.shape), dtype=_DTYPES[p.dtype], sparse=sparse, density=density)


def _roofline_work(
    segs: list[Segment], kept: set[int], resolved: dict[int, list[int]]
) -> tuple[dict[int, float], dict[int, int]]:
    """Bytes and kernels of every kept layer, its folded segments' included.

    A folded segment (an activation, pooling, dropout, a reshape that copies) is charged to the
    latest layer it reads from; one that reads no layer (work on the model input) to the next
    kept layer.
    """
    moved = {i: 0.0 for i in kept}
    kernels = {i: 0 for i in kept}
    pending_bytes, pending_kernels = 0.0, 0
    for s in segs:
        if s.index in kept:
            moved[s.index] += s.bytes + pending_bytes
            kernels[s.index] += s.kernels + pending_kernels
            pending_bytes, pending_kernels = 0.0, 0
        elif resolved[s.index]:
            owner = max(resolved[s.index])
            moved[owner] += s.bytes
            kernels[owner] += s.kernels
        else:
            pending_bytes += s.bytes
            pending_kernels += s.kernels
    return moved, kernels


def build_spec(trace: Trace, opts: BuildOptions) -> ModelSpec:
    """Fold, name and type the trace's segments into a validated ModelSpec."""
    segs = trace.segments
    kept_set: set[int] = set()
    # Walk in execution order; resolve each segment's inputs to the kept layers behind it.
    kept: list[int] = []
    resolved: dict[int, list[int]] = {}
    for s in segs:
        behind: list[int] = []
        for src in s.inputs:
            for r in [src] if src in kept_set else resolved[src]:
                if r not in behind:
                    behind.append(r)
        resolved[s.index] = behind
        if s.params or s.flops > 0 or len(behind) > 1:
            kept.append(s.index)
            kept_set.add(s.index)
    if not any(segs[i].params or segs[i].flops for i in kept):
        raise ValueError("the traced forward pass has no parameters and no FLOPs")
    names: dict[int, str] = {}
    used: dict[str, int] = {}
    for i in kept:
        base = segs[i].module_name or "root"
        used[base] = used.get(base, 0) + 1
        names[i] = base if used[base] == 1 else f"{base}#{used[base]}"
    unused = [n for n in trace.params if n not in trace.param_ops]
    if unused:
        warnings.warn(
            f"{len(unused)} parameters are not used by the forward pass and are left out "
            f"(first: {unused[0]})",
            stacklevel=2,
        )
    order = {n: k for k, n in enumerate(trace.params)}  # registration order within a layer
    moved, kernels = _roofline_work(segs, kept_set, resolved)
    layers = []
    for i in kept:
        s = segs[i]
        act = sum(t.numel() * t.element_size() for t in s.exported.values())
        layers.append(
            Layer(
                name=names[i],
                kind=_kind(s),
                fwd_flops=s.flops / opts.trace_batch,
                activation_bytes=act / opts.trace_batch,
                fwd_bytes=moved[i] / opts.trace_batch,
                fwd_kernels=kernels[i],
                variables=tuple(_variable(trace, n, opts) for n in sorted(s.params, key=order.__getitem__)),
                inputs=tuple(names[r] for r in resolved[i]),
            )
        )
    return ModelSpec(
        name=opts.name,
        family=opts.family,
        batch_size=opts.batch_size,
        layers=tuple(layers),
        source=opts.source,
    )
