"""Model import: a torch.nn.Module (or a ``module:factory`` string) and example inputs -> ModelSpec.

    >>> spec = extract_model(torch.nn.Linear(10, 20), torch.empty(1, 10), name="lin", batch_size=1)
    >>> spec.params, spec.fwd_flops
    (220, 400.0)

The model is copied onto the meta device (no parameter memory, tied parameters stay tied), put in
training mode, traced once (``tracer``) and folded into layers (``builder``). A model whose forward
pass needs tensor *values* (``.item()``, ``nonzero``, data-dependent branches) cannot run on meta
tensors; it is then traced once more on the CPU with zero-filled parameters and inputs, which
costs the model's memory (a warning says so). FLOPs follow torch's
``FlopCounterMode``: 2 FLOPs per multiply-add (a matmul is 2*M*N*K), bias adds and element-wise ops
not counted; so ``Linear(10, 20)`` is 2 * 10 * 20 = 400 forward FLOPs per sample.
"""

from __future__ import annotations

import copy
import importlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn

from simulator.extract.builder import BuildOptions, build_spec
from simulator.extract.tracer import Trace, trace
from simulator.spec import ModelSpec

Inputs = torch.Tensor | Sequence[torch.Tensor] | Mapping[str, torch.Tensor]
TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
}


def load_factory(target: str) -> Callable[..., Any]:
    """Resolve ``'package.module:attr'`` to a callable; ValueError says what is wrong."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{target!r} is not of the form MODULE:FACTORY")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # an import can fail in any way the module's code likes
        raise ValueError(f"cannot import {module_name!r}: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{target!r} is not callable")
    return obj


def example_inputs(shape: Sequence[int], dtype: str = "float32") -> torch.Tensor:
    """A meta tensor of ``shape``: floating inputs for images/features, integer ones for token ids."""
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(TORCH_DTYPES)}")
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"shape {tuple(shape)} must have dimensions >= 1")
    return torch.zeros(tuple(shape), dtype=TORCH_DTYPES[dtype], device="meta")


def to_meta(module: nn.Module, dtype: torch.dtype | None = None, device: str = "meta") -> nn.Module:
    """A copy of ``module`` whose parameters and buffers are meta tensors; ties are kept.

    The deep copy is seeded with meta replacements of every parameter and buffer, so no data is
    copied and a parameter shared by two submodules stays one parameter. ``dtype`` casts the
    floating-point ones. ``device="cpu"`` makes zero-filled CPU tensors instead (the fallback).
    """
    memo: dict[int, Any] = {}
    for t in [*module.parameters(), *module.buffers()]:
        if id(t) not in memo:
            cast = dtype if dtype is not None and t.is_floating_point() else t.dtype
            new = torch.zeros(t.shape, device=device, dtype=cast)
            is_param = isinstance(t, nn.Parameter)
            memo[id(t)] = nn.Parameter(new, requires_grad=t.requires_grad) if is_param else new
    return copy.deepcopy(module, memo)


def _call_with(inputs: Inputs) -> Callable[[nn.Module], Any]:
    if isinstance(inputs, torch.Tensor):
        return lambda m: m(inputs)
    if isinstance(inputs, Mapping):
        return lambda m: m(**inputs)
    return lambda m: m(*inputs)


def _batch_of(inputs: Inputs) -> int:
    first: Any = inputs
    if isinstance(inputs, Mapping):
        first = next(iter(inputs.values()), None)
    elif not isinstance(inputs, torch.Tensor):
        first = next(iter(inputs), None)
    if not isinstance(first, torch.Tensor) or first.dim() == 0:
        raise ValueError("inputs: the first input must be a tensor whose dimension 0 is the batch")
    return int(first.shape[0])


def _on(inputs: Inputs, device: str) -> Inputs:
    """The inputs as tensors on ``device``: meta (no data) or zero-filled CPU tensors."""

    def move(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        return v.to("meta") if device == "meta" else torch.zeros(v.shape, dtype=v.dtype, device=device)

    if isinstance(inputs, torch.Tensor):
        return cast(torch.Tensor, move(inputs))
    if isinstance(inputs, Mapping):
        return {k: move(v) for k, v in inputs.items()}
    return tuple(move(v) for v in inputs)


def _needs_data(e: Exception) -> bool:
    """Whether ``e`` is a meta tensor refusing to give up values it does not have."""
    text = str(e).lower()
    return "meta" in text and any(w in text for w in ("item()", "no data", "data-independent"))


def _trace_on_meta_or_cpu(module: nn.Module, inputs: Inputs, dtype: torch.dtype | None) -> Trace:
    for device in ("meta", "cpu"):
        model = to_meta(module, dtype, device)
        model.train()
        try:
            return trace(model, _call_with(_on(inputs, device)))
        except (RuntimeError, NotImplementedError) as e:
            if device == "cpu" or not _needs_data(e):
                raise
            warnings.warn(
                f"the forward pass needs tensor values ({str(e).splitlines()[0]}); "
                "tracing again on the CPU with zero-filled parameters",
                stacklevel=3,
            )
    raise AssertionError("unreachable")


def extract_model(
    module: nn.Module,
    inputs: Inputs | Callable[[], Inputs],
    *,
    name: str,
    batch_size: int | None = None,
    family: str = "",
    source: str = "",
    sparse_embeddings: bool = True,
    dtype: torch.dtype | None = None,
) -> ModelSpec:
    """Trace ``module`` on ``inputs`` (batch = dimension 0 of the first) into a ModelSpec.

    ``inputs`` is a tensor, a sequence of positional tensors, a mapping of keyword tensors, or a
    callable returning one of these (called under the meta device). ``batch_size`` is the spec's
    default per-GPU batch (default: the traced batch); FLOPs and activation bytes are per sample
    either way. ``sparse_embeddings=False`` marks embedding gradients dense (NCF-dense).
    ``dtype`` casts floating-point parameters (e.g. ``torch.float16``) before tracing.
    """
    given: Inputs
    if callable(inputs) and not isinstance(inputs, torch.Tensor):
        with torch.device("meta"):
            given = inputs()
    else:
        given = cast(Inputs, inputs)
    trace_batch = _batch_of(given)
    traced = _trace_on_meta_or_cpu(module, given, dtype)
    opts = BuildOptions(
        name=name,
        batch_size=batch_size or trace_batch,
        trace_batch=trace_batch,
        family=family,
        source=source or f"{type(module).__module__}.{type(module).__qualname__}",
        sparse_embeddings=sparse_embeddings,
    )
    return build_spec(traced, opts)


def import_model(
    target: str,
    input_shape: Sequence[int] | None = None,
    *,
    input_dtype: str = "float32",
    input_factory: str | None = None,
    name: str | None = None,
    batch_size: int | None = None,
    family: str = "",
) -> ModelSpec:
    """``strategist import-model``: build ``target`` (MODULE:FACTORY) on meta and extract it."""
    factory = load_factory(target)
    with torch.device("meta"):
        module: Any = factory()
    batch: Any = None
    if isinstance(module, tuple) and len(module) in (2, 3) and isinstance(module[0], nn.Module):
        module, batch = module[0], module[1]  # a search's model factory: (module, batch(n, step)[, loss])
    if not isinstance(module, nn.Module):
        raise ValueError(f"{target!r} returned {type(module).__name__}, not a torch.nn.Module")
    inputs: Inputs | Callable[[], Inputs]
    if input_factory is not None:
        inputs = load_factory(input_factory)
    elif input_shape is not None:
        inputs = example_inputs(input_shape, input_dtype)
    elif callable(batch):
        n = batch_size or 1
        inputs = lambda: batch(n, 0)[0]  # noqa: E731 - called under the meta device
    else:
        raise ValueError("give an input shape or an input factory")
    return extract_model(
        module,
        inputs,
        name=name or target.rpartition(":")[2],
        batch_size=batch_size,
        family=family,
        source=f"import-model {target}",
    )
