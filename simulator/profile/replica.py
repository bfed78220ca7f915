"""Layer replicas: each layer of a ModelSpec rebuilt as real torch ops of the layer's shapes.

A replica runs the kernels the layer's kind and shapes imply, on its own inputs, so its forward
and backward can be timed one layer at a time (``measure.profile_replicas``) for any spec, also
for models whose reference implementation does not import here (torchvision's CNNs: see
docs/architecture.md, "Facts checked on these machines"). Shapes come from the spec alone:

    linear       weight (out, in); rows per sample R = F / (2·in·out); input (B·R, in)
    conv*        weight (Cout, Cin, kh, kw), groups 1; output pixels P = F / (2·Cout·Cin·kh·kw);
                 a square input of side sqrt(P), stride 1, 'same' padding (same FLOPs and output)
    batchnorm*   weight (C,); pixels = activation / (elem·C); batch norm then ReLU (the CNNs'
                 pattern, which the extractor folds into the norm layer)
    *norm        weight (D,); rows = activation / (elem·D); layer norm
    embedding    table (V, D); lookups per sample = activation / (elem·D); sparse if the variable is
    linear (tied) only a bias (its weight belongs to an earlier layer): out = bias size,
                 rows = activation / (elem·out), in from F = 2·rows·in·out
    matmul       no parameters, an attention core (``compute.looks_like_attention``): heads =
                 width / 64, S from F = 4·S²·width: QK^T / 8, softmax, dropout 0.1, ·V;
                 otherwise a plain product with the same FLOPs and output size
    multiheadattention  nn.MultiheadAttention(E, E / 64 heads); tokens = activation / (elem·E)
    add/mul/sub  two inputs of the output's size; cat: the inputs' sizes, concatenated
    anything else  one element-wise op over the output's size

What a replica cannot know is left out: stride-2 inputs (4x the bytes of the output), activations
after linear layers (GELU), pooling and dropout that the extractor folded. The benchmark prints
which models were measured on replicas and which on their real implementation.

Shapes: every replica takes a batch B and returns a scalar-reducible output.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from simulator.analytical.compute import looks_like_attention
from simulator.spec import DTYPE_BYTES, Layer, ModelSpec

HEAD_DIM = 64


@dataclass
class Replica:
    """One layer as a runnable: ``run()`` is its forward; ``leaves`` get gradients in backward."""

    name: str
    run: Callable[[], torch.Tensor]
    leaves: list[torch.Tensor]  # parameters, and inputs when the layer reads another layer


def _elem(model: ModelSpec) -> int:
    for v in model.variables:
        if v.dtype in ("float32", "float16", "bfloat16"):
            return DTYPE_BYTES[v.dtype]
    return 4


def _square(pixels: float) -> int:
    return max(1, round(math.sqrt(max(pixels, 1.0))))


def build_replicas(
    model: ModelSpec, batch: int, device: torch.device, dtype: torch.dtype = torch.float32
) -> list[Replica]:
    """A replica of every layer of ``model`` for ``batch`` samples, in forward order."""
    elem = _elem(model)
    by_name = {layer.name: layer for layer in model.layers}
    return [_replica(layer, by_name, batch, elem, device, dtype) for layer in model.layers]


def _input(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype, grad: bool) -> torch.Tensor:
    """A random input; it needs a gradient only when it stands for another layer's output."""
    return torch.randn(shape, device=device, dtype=dtype).requires_grad_(grad)


def _made(name: str, run: Callable[[], torch.Tensor], module: nn.Module | None, *xs: torch.Tensor) -> Replica:
    params = list(module.parameters()) if module is not None else []
    return Replica(name, run, params + [x for x in xs if x.requires_grad])


def _replica(
    layer: Layer,
    by_name: dict[str, Layer],
    batch: int,
    elem: int,
    device: torch.device,
    dtype: torch.dtype,
) -> Replica:
    kind = layer.kind.lower()
    grad = bool(layer.inputs)  # the model input needs no gradient (first layers)

    def _leaf(shape: tuple[int, ...]) -> torch.Tensor:
        return _input(shape, device, dtype, grad)

    shapes = [v.shape for v in layer.variables]
    out_elems = max(1, round(layer.activation_bytes / elem))
    flops = layer.fwd_flops

    if kind == "linear" and shapes and len(shapes[0]) == 1 and flops > 0:
        # A linear whose weight is tied to (owned by) an earlier layer, e.g. an LM head on the
        # word embeddings: only its bias is here. out = bias size; rows from the output size.
        out_f = shapes[0][0]
        rows = max(1, round(out_elems / out_f))
        in_f = max(1, round(flops / (2.0 * rows * out_f)))
        tied = nn.Linear(in_f, out_f).to(device, dtype)
        x = _leaf((batch * rows, in_f))
        return _made(layer.name, lambda: tied(x), tied, x)

    if kind == "linear" and shapes and len(shapes[0]) == 2:
        out_f, in_f = shapes[0]
        rows = max(1, round(flops / (2.0 * in_f * out_f))) if flops else 1
        lin = nn.Linear(in_f, out_f, bias=len(shapes) > 1).to(device, dtype)
        x = _leaf((batch * rows, in_f))
        return _made(layer.name, lambda: lin(x), lin, x)

    if kind.startswith("conv") and shapes and len(shapes[0]) == 4:
        c_out, c_in, kh, kw = shapes[0]
        pixels = flops / (2.0 * c_out * c_in * kh * kw) if flops else out_elems / c_out
        side = _square(pixels)
        conv = nn.Conv2d(c_in, c_out, (kh, kw), padding="same", bias=len(shapes) > 1).to(device, dtype)
        x = _leaf((batch, c_in, side, side))
        return _made(layer.name, lambda: conv(x), conv, x)

    if kind.startswith("batchnorm") and shapes:
        c = shapes[0][0]
        side = _square(out_elems / c)
        bn = nn.BatchNorm2d(c).to(device, dtype)
        x = _leaf((batch, c, side, side))
        return _made(layer.name, lambda: torch.relu(bn(x)), bn, x)

    if "norm" in kind and shapes:
        d = shapes[0][-1]
        rows = max(1, round(out_elems / d))
        ln = nn.LayerNorm(d, elementwise_affine=True, bias=len(shapes) > 1).to(device, dtype)
        x = _leaf((batch * rows, d))
        return _made(layer.name, lambda: ln(x), ln, x)

    if kind == "embedding" and shapes and len(shapes[0]) == 2:
        rows, d = shapes[0]
        lookups = max(1, round(out_elems / d))
        sparse = layer.variables[0].sparse
        emb = nn.Embedding(rows, d, sparse=sparse).to(device, dtype)
        idx = torch.randint(0, rows, (batch, lookups), device=device)
        return _made(layer.name, lambda: emb(idx), emb)

    if kind == "multiheadattention" and shapes:
        e = shapes[0][1]
        tokens = max(1, round(out_elems / e))
        mha = nn.MultiheadAttention(e, max(1, e // HEAD_DIM), dropout=0.1, batch_first=True).to(device, dtype)
        x = _leaf((batch, tokens, e))
        return _made(layer.name, lambda: mha(x, x, x, need_weights=False)[0], mha, x)

    if kind == "matmul" and not shapes and flops > 0 and not looks_like_attention(layer):
        # A plain product with the same FLOPs and output: (B·M, K) @ (K, N) with M·N = out.
        k_dim = max(1, round(flops / (2.0 * out_elems)))
        n_dim = max(1, min(out_elems, 4096))
        m_dim = max(1, round(out_elems / n_dim))
        a_in, b_in = _leaf((batch * m_dim, k_dim)), _leaf((k_dim, n_dim))
        return _made(layer.name, lambda: a_in @ b_in, None, a_in, b_in)

    if kind == "matmul" and not shapes and flops > 0:
        seq = max(1, round(flops / (4.0 * out_elems)))
        width = max(1, round(out_elems / seq))
        heads = max(1, width // HEAD_DIM)
        dh = max(1, width // heads)
        q, k, v = (_leaf((batch, heads, seq, dh)) for _ in range(3))

        def attention() -> torch.Tensor:
            scores = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
            return F.dropout(scores, 0.1, training=True) @ v

        return _made(layer.name, attention, None, q, k, v)

    if kind == "cat" and layer.inputs:
        parts = [_leaf((batch, max(1, round(by_name[s].activation_bytes / elem)))) for s in layer.inputs]
        return _made(layer.name, lambda: torch.cat(parts, dim=1), None, *parts)

    if kind in ("add", "mul", "sub") and len(layer.inputs) >= 2:
        a, b = _leaf((batch, out_elems)), _leaf((batch, out_elems))
        ops: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
            "add": torch.add,
            "mul": torch.mul,
            "sub": torch.sub,
        }
        op = ops[kind]
        return _made(layer.name, lambda: op(a, b), None, a, b)

    x = _input((batch, out_elems), device, dtype, True)
    return _made(layer.name, lambda: x * 1.0, None, x)
