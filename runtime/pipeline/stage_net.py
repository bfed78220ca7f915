"""The torch module of one pipeline stage (a contiguous layer range of a ModelSpec) and its data.

Real compute (correctness; small models), the executor's SpecNet maths per layer kind:
``linear`` -> ``F.linear`` on the activation truncated or zero-padded to the layer's input width,
then tanh (not after the model's last linear layer); any other kind with variables -> every
variable ``v`` touches the activation as ``h + tanh(mean(h)) * mean(v)``. Embeddings are not
supported in a pipeline (token ids would have to cross stages): ``unsupported_layers`` names them.

Every variable is initialised from its own generator seeded by (seed, its index in the model), so
any split into stages holds exactly the values of the unsplit model, which is what the
single-process reference (``reference_step``) runs.

Replay compute (timing, big models): the stage's forward and backward sleep its layers' forward
and backward seconds for a micro-batch (the compute model's, ``simulator.pipeline.cost``), and the boundary tensor has the stage's output activation
bytes divided by ``scale`` (communication is real). Parameters: one flat buffer of the stage's
parameter bytes / scale, so the data-parallel all-reduce moves scaled real bytes.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from runtime.executor.model import _fit  # one width adapter for both executors' linear layers
from simulator.spec import Layer, ModelSpec

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _is_linear(layer: Layer) -> bool:
    return layer.kind == "linear" and len(layer.variables) in (1, 2) and len(layer.variables[0].shape) == 2


def unsupported_layers(model: ModelSpec) -> list[str]:
    """Layers real pipeline compute cannot run (embeddings)."""
    return [layer.name for layer in model.layers if layer.kind == "embedding"]


def input_width(model: ModelSpec) -> int:
    return next((layer.variables[0].shape[1] for layer in model.layers if _is_linear(layer)), 16)


def output_width(model: ModelSpec, last_layer: int) -> int:
    """Width of the activation after layers [0, last_layer)."""
    width = input_width(model)
    for layer in model.layers[:last_layer]:
        if _is_linear(layer):
            width = layer.variables[0].shape[0]
    return width


class StageNet(nn.Module):
    """Layers [first, last) of ``model`` with real maths."""

    def __init__(self, model: ModelSpec, first: int, last: int, seed: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.layers = model.layers[first:last]
        self.last_linear = max((i for i, layer in enumerate(model.layers) if _is_linear(layer)), default=-1)
        self.first = first
        index = model.variable_index
        params = []
        for layer in self.layers:
            for var in layer.variables:
                gen = torch.Generator().manual_seed(seed * 1_000_003 + index[var.name])
                fan_in = var.shape[-1] if len(var.shape) > 1 else var.shape[0]
                params.append(
                    nn.Parameter((torch.randn(var.shape, generator=gen) / math.sqrt(fan_in)).to(dtype))
                )
        self.params = nn.ParameterList(params)
        self.names = [v.name for layer in self.layers for v in layer.variables]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        vi = 0
        for li, layer in enumerate(self.layers, start=self.first):
            vs = list(self.params[vi : vi + len(layer.variables)])
            vi += len(layer.variables)
            if _is_linear(layer):
                w = vs[0]
                h = F.linear(_fit(h, w.shape[1]), w, vs[1] if len(vs) > 1 else None)
                if li != self.last_linear:
                    h = torch.tanh(h)
            else:
                for v in vs:
                    h = h + torch.tanh(h.mean(dim=1, keepdim=True)) * v.mean()
        return h


class _Sleep(torch.autograd.Function):
    """Identity-shaped op that sleeps ``fwd`` seconds forward and ``bwd`` seconds backward."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, w: torch.Tensor, fwd: float, bwd: float, out_numel: int
    ) -> torch.Tensor:
        ctx.bwd = bwd
        ctx.in_shape = x.shape
        # saved so that re-materialisation (``Recompute``: non-reentrant checkpointing recomputes a
        # forward when backward unpacks a tensor it saved) replays the forward's time in backward
        ctx.save_for_backward(x)
        time.sleep(fwd)
        return x.new_zeros((x.shape[0], out_numel))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        ctx.saved_tensors  # noqa: B018 (under Recompute: this unpack re-runs the forward first)
        time.sleep(ctx.bwd)
        # No weight gradient per micro-batch (None: autograd leaves ``w.grad`` alone). Building and
        # accumulating a zero tensor of the stage's scaled parameter bytes cost ~28 ms per backward
        # on this host (15 MB for a GPT-Medium stage), a per-micro-batch cost a GPU does not have
        # (its weight-gradient accumulation is inside the replayed backward time); it made every
        # small-b plan look slow (issue 17 profile, runtime/pipeline/README.md).
        return grad.new_zeros(ctx.in_shape), None, None, None, None


class ReplayStageNet(nn.Module):
    """A stage that replays its compute time and ships tensors of its scaled activation size.

    Its parameters are one flat buffer of the stage's scaled parameter bytes with a gradient buffer
    allocated once (``flat.grad``): the data-parallel all-reduce moves those bytes every step, but
    no backward writes into it (the replayed backward time already holds the accumulation) and no
    optimizer updates it (replayed parameters carry no values; ``runtime.pipeline.worker``).
    """

    def __init__(self, fwd_seconds: float, bwd_seconds: float, out_numel: int, param_numel: int) -> None:
        super().__init__()
        self.fwd_seconds = fwd_seconds
        self.bwd_seconds = bwd_seconds
        self.out_numel = out_numel
        self.flat = nn.Parameter(torch.zeros(max(1, param_numel)))
        self.flat.grad = torch.zeros_like(self.flat)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return _Sleep.apply(h, self.flat, self.fwd_seconds, self.bwd_seconds, self.out_numel)


class Recompute(nn.Module):
    """Re-materialisation (gradient checkpointing), as GPipe runs (Huang et al. 2019, §2.2): the
    stage keeps only its input per micro-batch (``torch.utils.checkpoint``, non-reentrant, which
    also gives parameter gradients on the first stage, whose input needs none) and re-runs its
    forward inside the backward. Parameters are ``inner``'s. In replay the recomputed forward
    sleeps the forward's time again, so a B action lasts forward + backward."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = checkpoint(self.inner, h, use_reentrant=False)
        assert isinstance(out, torch.Tensor)
        return out


def synthetic_batch(
    model: ModelSpec, iteration: int, seed: int, size: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch (inputs, targets) of ``iteration``, identical in every process."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + 7919 * iteration + 1)
    x = torch.randn(size, input_width(model), generator=gen).to(dtype)
    y = torch.randn(size, output_width(model, len(model.layers)), generator=gen).to(dtype)
    return x, y


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss of one micro-batch: mean squared error, averaged over samples and outputs."""
    return ((out - target) ** 2).mean()


def reference_step(
    model: ModelSpec,
    bounds: list[tuple[int, int]],
    seed: int,
    global_batch: int,
    steps: int,
    lr: float,
    dtype: str,
) -> list[dict[str, torch.Tensor]]:
    """Single-process SGD over the whole global batch: every step's gradients per variable name.

    The stages are chained in one process and the loss is the mean over the whole batch, so the
    result shares no schedule, no micro-batching and no communication with the pipeline.
    """
    dt = DTYPES[dtype]
    nets = [StageNet(model, a, b, seed, dt) for a, b in bounds]
    out: list[dict[str, torch.Tensor]] = []
    for it in range(steps):
        x, y = synthetic_batch(model, it, seed, global_batch, dt)
        h = x
        for net in nets:
            h = net(h)
        loss = mse(h, y)
        params = [p for net in nets for p in net.params]
        grads = torch.autograd.grad(loss, params)
        names = [n for net in nets for n in net.names]
        out.append({n: g.detach().clone() for n, g in zip(names, grads, strict=True)})
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(g, alpha=lr)
    return out
