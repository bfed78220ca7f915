"""Real compute of a hybrid run: a TaskGraph's layers on one device (its shards), data and init.

Maths per layer kind (the activation is ``[samples, TOKENS, width]``):

- ``linear`` ``[out, in]`` weight, optional ``[out]`` bias: ``h W^T + b``, then tanh except after
  the model's last linear layer;
- ``embedding`` ``[rows, dim]``: ``h + E[token mod rows]`` (the sample's token ids);
- ``attention`` (four ``[d, d]`` weights q, k, v, o; ``HybridConfig.attention_heads`` heads):
  ``h + softmax(q k^T / sqrt(d_head)) v W_o^T`` per head over the tokens;
- any other layer with variables: ``h + tanh(mean_last(h)) * mean(v)`` per variable (a real,
  differentiable use of every element; such layers are never sharded);
- loss: per sample the mean over tokens and features of ``(h - y)^2``; a device's loss is the
  *sum* over its rows divided by the global batch, so gradients summed over devices are the
  gradient of the global mean: the share-weighted average of the devices' mean gradients, exact
  for uneven shares.

Widths must chain exactly (a linear's input width is the running width); ``unsupported_reason``
says which layer does not. In a split TaskGraph, shards follow ``layout.shard_ops``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from runtime.hybrid.collectives import Group, copy_to_shards, gather_from_shards, reduce_from_shards
from runtime.hybrid.layout import Layout, Slice, variable_slices
from simulator.hybrid.sharding import ShardOp, is_attention, is_embedding, is_linear, shard_ops
from simulator.spec import Layer, ModelSpec, Variable

TOKENS = 4
DEFAULT_WIDTH = 8


def layer_width(layer: Layer, width: int) -> int:
    """The running width after ``layer`` given the width before it."""
    if is_linear(layer):
        return layer.variables[0].shape[0]
    if is_embedding(layer):
        return layer.variables[0].shape[1]
    return width


def input_width(model: ModelSpec) -> int:
    for layer in model.layers:
        if is_linear(layer):
            return layer.variables[0].shape[1]
        if is_embedding(layer):
            return layer.variables[0].shape[1]
        if is_attention(layer):
            return layer.variables[0].shape[0]
    return DEFAULT_WIDTH


def widths(model: ModelSpec) -> list[int]:
    """``widths[i]``: the running width before layer i (``widths[-1]``: the output's)."""
    w = [input_width(model)]
    for layer in model.layers:
        w.append(layer_width(layer, w[-1]))
    return w


def unsupported_reason(model: ModelSpec, layout: Layout) -> str | None:
    """Why real compute cannot run this model and plan (None if it can)."""
    w = widths(model)
    for i, layer in enumerate(model.layers):
        if is_linear(layer) and layer.variables[0].shape[1] != w[i]:
            return f"layers.{i}: linear input width {layer.variables[0].shape[1]} != running width {w[i]}"
        if is_embedding(layer) and layer.variables[0].shape[1] != w[i]:
            return f"layers.{i}: embedding width {layer.variables[0].shape[1]} != running width {w[i]}"
        if is_attention(layer):
            d = layer.variables[0].shape[0]
            if d != w[i]:
                return f"layers.{i}: attention width {d} != running width {w[i]}"
            if d % layout.heads:
                return f"layers.{i}: attention width {d} is not a multiple of {layout.heads} heads"
        if layer.kind == "attention" and not is_attention(layer):
            return f"layers.{i}: an attention layer needs four [d, d] weights (q, k, v, o)"
    for t, tg in enumerate(layout.plan.task_graphs):
        if tg.primitive != "split":
            continue
        for op in shard_ops(model, tg.first_layer, tg.last_layer):
            if op.kind in ("col", "row", "emb", "attn") and min(layout.split_sizes(t, op)) < 1:
                return f"task_graphs.{t}: layer {op.layer} cannot be cut into {tg.degree} non-empty shards"
    return None


def init_variable(var: Variable, index: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """The whole initial value of variable ``index`` (forward order): seeded per variable."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
    fan_in = var.shape[-1] if len(var.shape) > 1 else var.shape[0]
    return (torch.randn(var.shape, generator=gen, dtype=torch.float64) / math.sqrt(fan_in)).to(dtype)


@dataclass(frozen=True)
class Batch:
    x: torch.Tensor  # [B, TOKENS, input width]
    tokens: torch.Tensor  # [B, TOKENS] int64
    y: torch.Tensor  # [B, TOKENS, output width]

    def rows(self, lo: int, hi: int) -> Batch:
        return Batch(self.x[lo:hi], self.tokens[lo:hi], self.y[lo:hi])


def synthetic_batch(model: ModelSpec, step: int, seed: int, size: int, dtype: torch.dtype) -> Batch:
    """Step ``step``'s global batch (identical in every process)."""
    gen = torch.Generator().manual_seed(seed * 7_919 + step + 1)
    w = widths(model)
    vocab = max((layer.variables[0].shape[0] for layer in model.layers if is_embedding(layer)), default=1)
    x = torch.randn(size, TOKENS, w[0], generator=gen, dtype=torch.float64).to(dtype)
    tokens = torch.randint(0, vocab, (size, TOKENS), generator=gen)
    y = torch.randn(size, TOKENS, w[-1], generator=gen, dtype=torch.float64).to(dtype)
    return Batch(x, tokens, y)


def sample_loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample loss ``[B]``: mean over tokens and features of the squared error."""
    return ((h - y) ** 2).flatten(1).mean(dim=1)


def attention(
    x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, head_dim: int
) -> torch.Tensor:
    """Scaled dot-product attention over the tokens of the heads in ``wq/wk/wv`` (rows = heads x d_head)."""
    b, t, _ = x.shape
    q, k, v = (torch.matmul(x, w.t()).view(b, t, -1, head_dim).transpose(1, 2) for w in (wq, wk, wv))
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head_dim), dim=-1)
    return (att @ v).transpose(1, 2).reshape(b, t, -1)


class TaskGraphNet:
    """TaskGraph t's layers on one device: its parameter shards (leaf tensors) and the forward pass.

    ``group`` is the split group of the device's nested replica (None for replicate TaskGraphs and
    for a split of one device); ``index`` the device's position in its VirtualDevice.
    """

    def __init__(
        self, layout: Layout, t: int, index: int, group: Group, seed: int, dtype: torch.dtype
    ) -> None:
        model = layout.model
        tg = layout.plan.task_graphs[t]
        self.layout, self.t, self.index, self.group = layout, t, index, group
        self.split = tg.primitive == "split"
        self.ops = (
            shard_ops(model, tg.first_layer, tg.last_layer)
            if self.split
            else tuple(
                ShardOp(li, "none" if not model.layers[li].variables else "dup")
                for li in range(tg.first_layer, tg.last_layer)
            )
        )
        self.last_linear = max((i for i, layer in enumerate(model.layers) if is_linear(layer)), default=-1)
        first_var = sum(len(layer.variables) for layer in model.layers[: tg.first_layer])
        self.params: dict[str, torch.Tensor] = {}
        self.slices: dict[str, Slice | None] = {}
        self.sizes: dict[int, tuple[int, ...]] = {}
        vi = first_var
        for op in self.ops:
            layer = model.layers[op.layer]
            if self.split and op.kind in ("col", "row", "emb", "attn"):
                self.sizes[op.layer] = layout.split_sizes(t, op)
                slices = variable_slices(layer, op.kind, self.sizes[op.layer], index, layout.heads)
            else:
                slices = (None,) * len(layer.variables)
            for var, s in zip(layer.variables, slices, strict=True):
                full = init_variable(var, vi, seed, dtype)
                part = full if s is None else full.narrow(s.axis, s.lo, s.hi - s.lo)
                self.params[var.name] = part.clone().requires_grad_(True)
                self.slices[var.name] = s
                vi += 1

    def forward(self, h: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        model = self.layout.model
        for op in self.ops:
            layer = model.layers[op.layer]
            vs = [self.params[v.name] for v in layer.variables]
            act = op.layer != self.last_linear
            if is_linear(layer) and op.kind in ("col", "dup"):
                x = copy_to_shards(h, self.group) if op.kind == "col" else h
                h = torch.nn.functional.linear(x, vs[0], vs[1] if len(vs) > 1 else None)
                h = torch.tanh(h) if act else h
                if op.gather_after:
                    h = gather_from_shards(h, self.group, self.sizes[op.layer], self.index)
            elif op.kind == "row":
                h = reduce_from_shards(torch.matmul(h, vs[0].t()), self.group)
                h = h + vs[1] if len(vs) > 1 else h
                h = torch.tanh(h) if act else h
            elif is_embedding(layer):
                rows = layer.variables[0].shape[0]
                tok = tokens % rows
                if op.kind == "emb":
                    lo = sum(self.sizes[op.layer][: self.index])
                    n = vs[0].shape[0]
                    mask = (tok >= lo) & (tok < lo + n)
                    e = vs[0][(tok - lo).clamp(0, n - 1)] * mask.unsqueeze(-1).to(h.dtype)
                    h = h + reduce_from_shards(e, self.group)
                else:
                    h = h + vs[0][tok]
            elif is_attention(layer):
                head_dim = layer.variables[0].shape[0] // self.layout.heads
                x = copy_to_shards(h, self.group) if op.kind == "attn" else h
                ctx = attention(x, vs[0], vs[1], vs[2], head_dim)
                out = torch.matmul(ctx, vs[3].t())
                h = h + (reduce_from_shards(out, self.group) if op.kind == "attn" else out)
            else:
                for v in vs:
                    h = h + torch.tanh(h.mean(dim=-1, keepdim=True)) * v.mean()
        return h
