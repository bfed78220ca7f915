"""Edges E'_G of the transformed graph: model DAG edges lifted to variables, then to shards.

AutoSync §5 runs the GAT on {V'_{G,θ}, E'_G}: the partitioned variables connected as the model's
data flow connects their layers. Layers without variables (activations, pooling, adds) are
contracted: a variable-bearing layer is linked to the nearest variable-bearing layers upstream
of it. The variables of one layer are chained, and so are the shards of one variable.
"""

from __future__ import annotations

import numpy as np

from simulator.spec import ModelSpec


def variable_edges(model: ModelSpec) -> tuple[tuple[int, int], ...]:
    """Undirected variable adjacency (a < b, variable indices in forward order)."""
    first: list[int] = []
    count: list[int] = []
    offset = 0
    for layer in model.layers:
        first.append(offset)
        count.append(len(layer.variables))
        offset += len(layer.variables)
    feeders: list[frozenset[int]] = []
    inputs: list[list[int]] = [[] for _ in model.layers]
    for src, dst in model.edges:
        inputs[dst].append(src)
    for li in range(len(model.layers)):
        up: set[int] = set()
        for p in inputs[li]:
            up |= {p} if count[p] else feeders[p]
        feeders.append(frozenset(up))
    pairs: set[tuple[int, int]] = set()
    for li in range(len(model.layers)):
        if not count[li]:
            continue
        own = range(first[li], first[li] + count[li])
        pairs.update((a, a + 1) for a in own[:-1])
        for p in feeders[li]:
            for a in range(first[p], first[p] + count[p]):
                pairs.update((min(a, b), max(a, b)) for b in own)
    return tuple(sorted(pairs))


def shard_edges(var_of: np.ndarray, var_edges: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Edges between shards, both directions, shape (2, E).

    ``var_of[i]`` is the variable index of shard i (shards grouped by variable, forward order).
    Every shard of variable a is linked to every shard of an adjacent variable b; consecutive
    shards of one variable are chained.
    """
    n = len(var_of)
    nvars = int(var_of.max()) + 1 if n else 0
    starts = np.searchsorted(var_of, np.arange(nvars + 1))
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    same = np.nonzero(var_of[1:] == var_of[:-1])[0]
    src.append(same)
    dst.append(same + 1)
    for a, b in var_edges:
        sa = np.arange(starts[a], starts[a + 1])
        sb = np.arange(starts[b], starts[b + 1])
        src.append(np.repeat(sa, len(sb)))
        dst.append(np.tile(sb, len(sa)))
    s = np.concatenate(src) if src else np.zeros(0, dtype=np.int64)
    d = np.concatenate(dst) if dst else np.zeros(0, dtype=np.int64)
    return np.stack([np.concatenate([s, d]), np.concatenate([d, s])]).astype(np.int64)
