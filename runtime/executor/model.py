"""Real compute: a torch computation built from a ModelSpec, and its deterministic synthetic data.

Supported layer kinds (matched on ``Layer.kind``):

- ``linear``: variables ``[out, in]`` weight and optional ``[out]`` bias -> ``F.linear`` then tanh
  (no tanh after the last layer). The running activation is truncated or zero-padded to ``in``.
- ``embedding``: one ``[rows, dim]`` variable -> ``F.embedding`` of the sample's token ids
  (``sparse=True`` when the variable is sparse, so the gradient is a real row-sparse tensor),
  averaged over the tokens and added to the (resized) activation.
- anything else (generic fallback): every variable ``v`` touches the activation through
  ``h + tanh(h.mean(1)) * mean(v)``: a real, differentiable use of every element, not the
  layer's true maths. Real mode is for correctness, not for timing; big models use replay.

The loss is the mean squared error against a synthetic target, averaged over the batch, so the
average of the workers' gradients equals the gradient of the global batch. The target is random
noise by default (nothing to learn: enough for sync correctness), or, with ``teacher_seed``, the
output of a fixed *teacher*: the same architecture with its own seeded weights, so the student can
learn it and a run has a loss to reach (the time-to-accuracy check, ``runtime/accuracy.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from simulator.spec import Layer, ModelSpec

TOKENS_PER_SAMPLE = 4
DEFAULT_WIDTH = 16


@dataclass(frozen=True)
class Batch:
    x: torch.Tensor  # [B, input width] float
    tokens: torch.Tensor  # [B, TOKENS_PER_SAMPLE] int64
    y: torch.Tensor  # [B, output width] float


def _is_linear(layer: Layer) -> bool:
    return layer.kind == "linear" and len(layer.variables) in (1, 2) and len(layer.variables[0].shape) == 2


def _is_embedding(layer: Layer) -> bool:
    return layer.kind == "embedding" and len(layer.variables) == 1 and len(layer.variables[0].shape) == 2


def _fit(h: torch.Tensor, width: int) -> torch.Tensor:
    if h.shape[1] == width:
        return h
    if h.shape[1] > width:
        return h[:, :width]
    return F.pad(h, (0, width - h.shape[1]))


class SpecNet:
    """The model's variables as leaf tensors (forward order) and the forward pass over them."""

    def __init__(
        self, model: ModelSpec, seed: int, device: torch.device, teacher_seed: int | None = None
    ) -> None:
        self.model = model
        self.params: list[torch.Tensor] = []
        gen = torch.Generator().manual_seed(seed)
        for var in model.variables:
            fan_in = var.shape[-1] if len(var.shape) > 1 else var.shape[0]
            std = 0.1 if var.sparse else 1.0 / math.sqrt(fan_in)
            t = torch.randn(var.shape, generator=gen) * std
            self.params.append(t.to(device).requires_grad_(True))
        self.input_width = next(
            (layer.variables[0].shape[1] for layer in model.layers if _is_linear(layer)), DEFAULT_WIDTH
        )
        self.output_width = self._output_width()
        self.vocab = max((v.shape[0] for v in model.variables if v.sparse), default=1)
        # The teacher lives on the CPU, where the global batch is drawn.
        self.teacher = None if teacher_seed is None else SpecNet(model, teacher_seed, torch.device("cpu"))

    def _output_width(self) -> int:
        width = self.input_width
        for layer in self.model.layers:
            if _is_linear(layer):
                width = layer.variables[0].shape[0]
            elif _is_embedding(layer):
                width = layer.variables[0].shape[1]
        return width

    def loss(self, batch: Batch) -> torch.Tensor:
        return ((_fit(self.predict(batch), batch.y.shape[1]) - batch.y) ** 2).mean()

    def predict(self, batch: Batch) -> torch.Tensor:
        """The network's output for ``batch`` (``[B, width]``; the target ``y`` is not used)."""
        h = batch.x
        vi = 0
        last_linear = max((i for i, layer in enumerate(self.model.layers) if _is_linear(layer)), default=-1)
        for li, layer in enumerate(self.model.layers):
            vs = self.params[vi : vi + len(layer.variables)]
            vi += len(layer.variables)
            if _is_linear(layer):
                w = vs[0]
                h = F.linear(_fit(h, w.shape[1]), w, vs[1] if len(vs) > 1 else None)
                if li != last_linear:
                    h = torch.tanh(h)
            elif _is_embedding(layer):
                w = vs[0]
                sparse = layer.variables[0].sparse
                e = F.embedding(batch.tokens % w.shape[0], w, sparse=sparse).mean(dim=1)
                h = _fit(h, w.shape[1]) + e
            else:
                for v in vs:
                    h = h + torch.tanh(h.mean(dim=1, keepdim=True)) * v.mean()
        return h

    def global_batch(self, iteration: int, seed: int, size: int, device: torch.device) -> Batch:
        """The synthetic global batch of ``iteration`` (identical in every process)."""
        gen = torch.Generator().manual_seed(seed * 1_000_003 + iteration)
        x = torch.randn(size, self.input_width, generator=gen)
        tokens = torch.randint(0, self.vocab, (size, TOKENS_PER_SAMPLE), generator=gen)
        y = torch.randn(size, self.output_width, generator=gen)
        if self.teacher is not None:
            with torch.no_grad():
                y = _fit(self.teacher.predict(Batch(x, tokens, y)), self.output_width).cpu()
        return Batch(x.to(device), tokens.to(device), y.to(device))


def local_slice(batch: Batch, worker: int, per_worker: int) -> Batch:
    lo, hi = worker * per_worker, (worker + 1) * per_worker
    return Batch(batch.x[lo:hi], batch.tokens[lo:hi], batch.y[lo:hi])
