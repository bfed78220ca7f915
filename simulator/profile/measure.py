"""Measure forward and backward seconds: per layer on replicas, and whole models where they import.

``profile_model`` is what ``strategist profile`` runs:

1. every layer's replica (``replica.build_replicas``) is timed alone, forward then backward,
   median of ``repeats`` after one warm-up (``clock_for``: the thread's CPU time on a CPU with
   one torch thread; on CUDA the wall clock with a synchronise around each pass, so the time is
   the kernels' and not the launch queue's);
2. when the model's real implementation can be built here (the zoo's reference implementation
   where it imports — ``reference_models`` for NCF and the WMT Transformer, transformers for
   BERT/GPT when installed, never torchvision beside torch 2.13 — or the user's
   ``MODULE:FACTORY``), its whole forward and backward are timed the same way, and the layers'
   forward (backward) times are scaled so they sum to the whole model's: the per-layer split
   comes from the replicas, the total from the real model (``Profile.source`` says which).

Decision: per-layer times of a real module would need attributing autograd's backward kernels to
layers; the replicas give every layer its own measurement instead, and the real model's total
corrects what replicas leave out (folded activations, pooling, dropout, stride-2 inputs).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from simulator.profile.replica import build_replicas
from simulator.spec import ModelSpec
from simulator.spec.profile import LayerTime, Profile

TORCH_DTYPES = {
    "float32": torch.float32,
    "tf32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


@dataclass(frozen=True)
class Timing:
    """Median forward and backward seconds of one runnable."""

    fwd_s: float
    bwd_s: float


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock_for(device: torch.device) -> Callable[[], float]:
    """The calling thread's CPU time on a CPU with one torch thread; else the wall clock.

    With more torch threads, work runs on a pool the thread clock does not see: wall clock then.
    """
    if device.type == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time
    return time.perf_counter


def _first_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        values: Sequence[Any] = list(out.values())
    elif isinstance(out, Sequence):
        values = out
    else:
        values = [getattr(out, k) for k in vars(out)]
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v
    raise ValueError("the model's output holds no floating-point tensor to take a gradient from")


def time_passes(
    forward: Callable[[], Any],
    leaves: Sequence[torch.Tensor],
    device: torch.device,
    repeats: int = 3,
    stat: Callable[[list[float]], float] = statistics.median,
) -> Timing:
    """Seconds of ``forward()`` and of the backward of its (first) output: ``stat`` over runs.

    ``stat`` is the median by default; ``min`` gives the least-disturbed run on a shared machine.
    The clock (``clock_for``) is the calling thread's CPU time on a CPU device, so time the
    scheduler gives other processes is not counted (torch runs single-threaded CPU work,
    backward included, on the calling thread), and the wall clock around a synchronise on CUDA.

    The output's gradient is all ones, made before the clock starts; gradients of ``leaves``
    (parameters and leaf inputs) are reset between runs, outside the clock.
    """
    clock = clock_for(device)
    fwd: list[float] = []
    bwd: list[float] = []
    for i in range(repeats + 1):
        for t in leaves:
            t.grad = None
        _sync(device)
        t0 = clock()
        out = _first_tensor(forward())
        _sync(device)
        t1 = clock()
        grad = torch.ones_like(out)
        _sync(device)
        t2 = clock()
        if out.requires_grad:  # a parameter-free layer reading only the model input has no backward
            out.backward(grad)
        _sync(device)
        t3 = clock()
        if i:  # the first run warms up allocators and kernel caches
            fwd.append(t1 - t0)
            bwd.append(t3 - t2)
    return Timing(stat(fwd), stat(bwd))


def time_replicas(
    model: ModelSpec,
    batch: int,
    device: torch.device,
    dtype: str = "float32",
    repeats: int = 3,
    stat: Callable[[list[float]], float] = statistics.median,
) -> list[Timing]:
    """Forward and backward seconds of every layer's replica (``replica`` module docstring)."""
    replicas = build_replicas(model, batch, device, TORCH_DTYPES[dtype])
    return [time_passes(r.run, r.leaves, device, repeats, stat) for r in replicas]


def time_module(
    module: nn.Module,
    inputs: Any,
    device: torch.device,
    repeats: int = 3,
    stat: Callable[[list[float]], float] = statistics.median,
) -> Timing:
    """Forward and backward seconds of a whole module on ``inputs`` (tensor, tuple or mapping)."""
    module.train()
    params = list(module.parameters())

    def forward() -> Any:
        if isinstance(inputs, torch.Tensor):
            return module(inputs)
        if isinstance(inputs, Mapping):
            return module(**inputs)
        return module(*inputs)

    return time_passes(forward, params, device, repeats, stat)


def reference_module(
    name: str, batch: int, device: torch.device, model: ModelSpec | None = None
) -> tuple[nn.Module, Any] | None:
    """The zoo model ``name``'s real implementation and inputs for ``batch``, or None where it
    does not import here (torchvision beside torch 2.13; transformers not installed).

    With ``model`` (its spec), embeddings whose variable is sparse there get sparse gradients.
    """
    from simulator.extract.zoo_models import ZOO_MODELS

    recipe = next((r for r in ZOO_MODELS if r.name == name), None)
    if recipe is None:
        return None
    try:
        module = recipe.factory()
    except ImportError:
        return None
    except RuntimeError as e:  # torchvision's "operator torchvision::nms does not exist"
        if "torchvision" in str(e):
            return None
        raise
    spec_sparse = {v.name for v in model.variables if v.sparse} if model is not None else set()
    for qual, sub in module.named_modules():
        if isinstance(sub, nn.Embedding) and f"{qual}.weight" in spec_sparse:
            sub.sparse = True  # the spec's row-sparse gradient (NCF-sparse), as the model trains
    inputs = recipe.inputs(batch)
    return module.to(device), _to(inputs, device)


def _to(inputs: Any, device: torch.device) -> Any:
    if isinstance(inputs, torch.Tensor):
        return inputs.to(device)
    if isinstance(inputs, Mapping):
        return {k: _to(v, device) for k, v in inputs.items()}
    return tuple(_to(v, device) for v in inputs)


def profile_model(
    model: ModelSpec,
    *,
    device_name: str,
    batch: int,
    device: torch.device,
    dtype: str = "float32",
    repeats: int = 3,
    module: tuple[nn.Module, Any] | None = None,
    note: str = "",
) -> Profile:
    """Profile ``model``: per-layer replica times, scaled to the real ``module``'s totals if given.

    ``device_name`` is the DeviceType name the profile is keyed by (the cost model looks it up
    with the cluster's device type name).
    """
    if dtype != "float32" and module is not None:
        module = (module[0].to(TORCH_DTYPES[dtype]), module[1])
    per_layer = time_replicas(model, batch, device, dtype, repeats)
    fwd = [t.fwd_s for t in per_layer]
    bwd = [t.bwd_s for t in per_layer]
    step: float | None = None
    how = f"replicas per layer ({repeats} runs, median)"
    if module is not None:
        whole = time_module(module[0], module[1], device, repeats)
        sf, sb = sum(fwd), sum(bwd)
        fwd = [t * whole.fwd_s / sf for t in fwd] if sf > 0 else fwd
        bwd = [t * whole.bwd_s / sb for t in bwd] if sb > 0 else bwd
        step = whole.fwd_s + whole.bwd_s
        how += f"; scaled to the real module's fwd {whole.fwd_s:.4g} s, bwd {whole.bwd_s:.4g} s"
    threads = torch.get_num_threads() if device.type == "cpu" else None
    where = f"{device.type}" + (f", {threads} torch threads" if threads else "")
    return Profile(
        model=model.name,
        device=device_name,
        dtype=dtype,
        batch=batch,
        layers=tuple(
            LayerTime(name=layer.name, fwd_s=f, bwd_s=b)
            for layer, f, b in zip(model.layers, fwd, bwd, strict=True)
        ),
        step_s=step,
        source=f"strategist profile on {where}: {how}" + (f"; {note}" if note else ""),
    )
