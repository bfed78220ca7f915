"""Random valid strategies for tests and benchmarks (not the search's sampler: no constraints)."""

from __future__ import annotations

import numpy as np

from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    ModelSpec,
    Partition,
    PSSync,
    Strategy,
    Variable,
    VariableStrategy,
)


def random_strategy(
    model: ModelSpec, cluster: ClusterSpec, rng: np.random.Generator, max_shards: int = 4
) -> Strategy:
    """A uniformly mixed strategy: random partitions, PS placements, groups, compressors, algorithms.

    Every choice the vocabulary allows is exercised; the result passes ``Strategy.check``.
    """
    nodes = [n.name for n in cluster.nodes]
    return Strategy(
        name="random",
        variables=tuple(_random_variable(v, nodes, rng, max_shards) for v in model.variables),
    )


def random_strategies(model: ModelSpec, cluster: ClusterSpec, n: int, seed: int = 0) -> list[Strategy]:
    rng = np.random.default_rng(seed)
    return [random_strategy(model, cluster, rng) for _ in range(n)]


def _random_variable(
    v: Variable, nodes: list[str], rng: np.random.Generator, max_shards: int
) -> VariableStrategy:
    axis = 0 if v.sparse else int(rng.integers(len(v.shape)))
    k = 1 if rng.random() < 0.6 else int(rng.integers(1, min(v.shape[axis], max_shards) + 1))
    syncs: list[PSSync | CollectiveSync] = []
    for _ in range(k):
        if rng.random() < 0.5:
            syncs.append(
                PSSync(
                    server=nodes[int(rng.integers(len(nodes)))],
                    local_replication=bool(rng.random() < 0.5),
                    staleness=int(rng.integers(0, 2)),
                )
            )
            continue
        kinds = ["none", "fp16"] + (["powersgd"] if not v.sparse and len(v.shape) >= 2 else [])
        kind = kinds[int(rng.integers(len(kinds)))]
        comp = Compressor(kind=kind, rank=int(rng.integers(1, 5)) if kind == "powersgd" else None)
        syncs.append(
            CollectiveSync(
                group=int(rng.integers(0, 4)),
                compressor=comp,
                algorithm="ring" if rng.random() < 0.5 else "hierarchical",
            )
        )
    return VariableStrategy(variable=v.name, partition=Partition(axis=axis, shards=k), shards=tuple(syncs))
