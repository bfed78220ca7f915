"""Single-process reference for hybrid runs: plain SGD on the whole model and the whole batch.

It shares only the seeded initial values and data with the executor (``net.init_variable``,
``net.synthetic_batch``); the maths is written again without shards, attention through torch's
own ``scaled_dot_product_attention``, so a sharding or bridge bug cannot cancel out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from runtime.hybrid.net import init_variable, synthetic_batch
from simulator.hybrid.sharding import is_attention, is_embedding, is_linear
from simulator.spec import ModelSpec


def reference_grads(
    model: ModelSpec, global_batch: int, steps: int, lr: float, seed: int, heads: int, dtype: torch.dtype
) -> tuple[list[dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
    """Every step's gradients by variable name, and the parameters after ``steps`` SGD steps."""
    params = {
        v.name: init_variable(v, i, seed, dtype).requires_grad_(True) for i, v in enumerate(model.variables)
    }
    last_linear = max((i for i, layer in enumerate(model.layers) if is_linear(layer)), default=-1)
    history = []
    for step in range(steps):
        batch = synthetic_batch(model, step, seed, global_batch, dtype)
        h = batch.x
        for li, layer in enumerate(model.layers):
            vs = [params[v.name] for v in layer.variables]
            if is_linear(layer):
                h = h @ vs[0].t() + (vs[1] if len(vs) > 1 else 0)
                if li != last_linear:
                    h = torch.tanh(h)
            elif is_embedding(layer):
                h = h + F.embedding(batch.tokens % vs[0].shape[0], vs[0])
            elif is_attention(layer):
                b, t, d = h.shape
                q, k, v = ((h @ w.t()).view(b, t, heads, d // heads).transpose(1, 2) for w in vs[:3])
                ctx = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
                h = h + ctx @ vs[3].t()
            else:
                for v in vs:
                    h = h + torch.tanh(h.mean(dim=-1, keepdim=True)) * v.mean()
        loss = ((h - batch.y) ** 2).mean()
        grads = torch.autograd.grad(loss, list(params.values()))
        history.append({n: g.detach().clone() for n, g in zip(params, grads, strict=True)})
        with torch.no_grad():
            for p, g in zip(params.values(), grads, strict=True):
                p.sub_(g, alpha=lr)
    return history, {n: p.detach() for n, p in params.items()}
