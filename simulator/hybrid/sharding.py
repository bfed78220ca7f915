"""Which layers of a split TaskGraph are sharded, and how (Whale's sharding patterns, Megatron pairing).

The one statement of the rule, imported by the executor (``runtime.hybrid``) and the cost model: a
linear whose input is whole is column-parallel (output sharded); the
next linear is row-parallel (partial sums all-reduced); any other layer needs the whole activation,
so a column op left open before it (or at the TaskGraph's end) all-gathers its output; an embedding
is vocab-parallel (masked lookup, all-reduce); an attention layer (four square weights) is split
by heads; every other layer runs whole on every device ('dup' with parameters, 'none' without).

Collectives per shard op, forward: row, emb, attn all-reduce their output; a gathering col
all-gathers it. Backward: col and attn all-reduce their input gradient (none for the model's
first layer, whose input needs no gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.spec import Layer, ModelSpec

ShardKind = Literal["col", "row", "emb", "attn", "dup", "none"]
SHARDED: frozenset[str] = frozenset({"col", "row", "emb", "attn"})


def is_linear(layer: Layer) -> bool:
    return layer.kind == "linear" and len(layer.variables) in (1, 2) and len(layer.variables[0].shape) == 2


def is_embedding(layer: Layer) -> bool:
    return layer.kind == "embedding" and len(layer.variables) == 1 and len(layer.variables[0].shape) == 2


def is_attention(layer: Layer) -> bool:
    """An attention layer: four [d, d] weights q, k, v, o (no biases), ``kind == 'attention'``."""
    return (
        layer.kind == "attention"
        and len(layer.variables) == 4
        and all(v.shape == layer.variables[0].shape and len(v.shape) == 2 for v in layer.variables)
        and layer.variables[0].shape[0] == layer.variables[0].shape[1]
    )


@dataclass(frozen=True)
class ShardOp:
    """How one layer of a split TaskGraph runs on its devices."""

    layer: int
    kind: ShardKind
    gather_after: bool = False  # all-gather the (column-)sharded output in the split dimension


def shard_ops(model: ModelSpec, first: int, last: int) -> tuple[ShardOp, ...]:
    """The shard op of every layer of a split TaskGraph over layers [first, last)."""
    ops: list[ShardOp] = []
    sharded = False
    for li in range(first, last):
        layer = model.layers[li]
        if is_linear(layer):
            ops.append(ShardOp(li, "row" if sharded else "col"))
            sharded = not sharded
            continue
        if sharded:
            ops[-1] = ShardOp(ops[-1].layer, ops[-1].kind, True)
            sharded = False
        if is_embedding(layer):
            ops.append(ShardOp(li, "emb"))
        elif is_attention(layer):
            ops.append(ShardOp(li, "attn"))
        else:
            ops.append(ShardOp(li, "dup" if layer.variables else "none"))
    if sharded:
        ops[-1] = ShardOp(ops[-1].layer, ops[-1].kind, True)
    return tuple(ops)
