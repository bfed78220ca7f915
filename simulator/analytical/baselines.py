"""The hand-optimised baselines of AutoSync supplementary §8, as strategies every search must beat.

    horovod           AllReduce for dense and AllGather for sparse gradients, fused in buckets of
                      adjacent variables in back-propagation order; the bucket size threshold (and
                      the hierarchical all-reduce switch) tuned with Optuna against this cost model,
                      as Horovod's autotune tunes its fusion threshold with Bayesian optimisation.
    ps                Large variables partitioned across all nodes, shards placed by
                      bandwidth-aware load balance, hierarchical reduction on multi-GPU nodes,
                      sparse gradients as gathered rows (m_i density-scaled); the partition size
                      threshold tuned with Optuna (the paper follows ByteScheduler's BO).
    ps-naive          Every variable whole on one server, the first node; no local reduction.
    allreduce-single  Every variable all-reduced (sparse: all-gathered) in one merge group.

Since Eq. 1-3 charge φ and δ per collective call and model no backward overlap, the cost model
prefers larger buckets; Horovod's tuned threshold therefore tends to the top of its range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from simulator.analytical.arrays import cluster_arrays, model_arrays
from simulator.analytical.batch import encode
from simulator.analytical.params import CostParams
from simulator.analytical.vectorised import score
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    ModelSpec,
    Partition,
    PSSync,
    Strategy,
    VariableStrategy,
)

if TYPE_CHECKING:
    import optuna

BASELINES = ("horovod", "ps", "ps-naive", "allreduce-single")
MIB = 1 << 20
#: Horovod autotune's range for the fusion threshold, bytes (its default is 64 MiB).
FUSION_RANGE = (1 * MIB, 128 * MIB)
#: Range of the PS baseline's partition threshold: variables larger than it are partitioned.
PARTITION_RANGE = (256 * 1024, 64 * MIB)


def baseline(
    name: str,
    model: ModelSpec,
    cluster: ClusterSpec,
    params: CostParams | None = None,
    trials: int = 24,
    seed: int = 0,
) -> Strategy:
    """The baseline ``name`` (one of ``BASELINES``) for ``model`` on ``cluster``.

    ``trials`` and ``seed`` drive the Optuna tuning of horovod and ps (deterministic per seed).
    """
    params = params or CostParams()
    if name == "horovod":
        return _tuned(
            lambda t: horovod(
                model,
                cluster,
                threshold=t.suggest_float("threshold", *FUSION_RANGE, log=True),
                hierarchical=t.suggest_categorical("hierarchical", [False, True]),
            ),
            model,
            cluster,
            params,
            trials,
            seed,
        )
    if name == "ps":
        return _tuned(
            lambda t: ps(model, cluster, threshold=t.suggest_float("threshold", *PARTITION_RANGE, log=True)),
            model,
            cluster,
            params,
            trials,
            seed,
        )
    if name == "ps-naive":
        return ps_naive(model, cluster)
    if name == "allreduce-single":
        return allreduce_single(model, cluster)
    raise ValueError(f"name: unknown baseline {name!r}; known: {', '.join(BASELINES)}")


def horovod(model: ModelSpec, cluster: ClusterSpec, threshold: float, hierarchical: bool = False) -> Strategy:
    """Horovod with fusion ``threshold`` bytes: adjacent variables in back-prop order share a bucket.

    A bucket is closed when adding the next variable would exceed the threshold (a variable larger
    than the threshold gets a bucket of its own), as Horovod's tensor fusion fills its buffer.
    """
    algorithm = "hierarchical" if hierarchical else "ring"
    groups: dict[str, int] = {}
    group, filled = 0, 0
    for v in reversed(model.variables):
        if filled and filled + v.bytes > threshold:
            group, filled = group + 1, 0
        groups[v.name] = group
        filled += v.bytes
    syncs = [CollectiveSync(group=g, algorithm=algorithm) for g in range(group + 1)]
    return _strategy(
        "horovod",
        model,
        cluster,
        [VariableStrategy(variable=v.name, shards=(syncs[groups[v.name]],)) for v in model.variables],
    )


def ps(model: ModelSpec, cluster: ClusterSpec, threshold: float) -> Strategy:
    """Load-balanced PS: variables over ``threshold`` bytes split on axis 0 into one shard per node.

    Shards, largest message first, go to the node j minimising (load_j + m)/b_j, with b_j the
    node's own bandwidth (AutoSync Algorithm 1's weights, taken greedily instead of sampled).
    """
    nodes = len(cluster.nodes)
    bw = [cluster.node_bandwidth_gbps(j) for j in range(nodes)]
    local = max(n.gpus for n in cluster.nodes) > 1
    pieces: list[tuple[float, str, int]] = []  # (message bytes, variable, shard index)
    parts: dict[str, Partition] = {}
    for v in model.variables:
        k = min(nodes, v.shape[0]) if v.bytes > threshold else 1
        parts[v.name] = Partition(axis=0, shards=k)
        for i, shape in enumerate(parts[v.name].shard_shapes(v.shape)):
            pieces.append((math.prod(shape) * v.bytes / v.numel * v.density, v.name, i))
    load = [0.0] * nodes
    server: dict[tuple[str, int], int] = {}
    for m, name, i in sorted(pieces, key=lambda p: -p[0]):
        j = min(range(nodes), key=lambda j: ((load[j] + m) / bw[j], j))
        load[j] += m
        server[(name, i)] = j
    syncs = [PSSync(server=n.name, local_replication=local) for n in cluster.nodes]  # frozen: shared
    return _strategy(
        "ps",
        model,
        cluster,
        [
            VariableStrategy(
                variable=v.name,
                partition=parts[v.name],
                shards=tuple(syncs[server[(v.name, i)]] for i in range(parts[v.name].shards)),
            )
            for v in model.variables
        ],
    )


def ps_naive(model: ModelSpec, cluster: ClusterSpec) -> Strategy:
    """Every variable whole on the first node's server, one message per GPU."""
    shards = (PSSync(server=cluster.nodes[0].name),)  # frozen: shared by every variable
    return _strategy(
        "ps-naive",
        model,
        cluster,
        [VariableStrategy(variable=v.name, shards=shards) for v in model.variables],
    )


def allreduce_single(model: ModelSpec, cluster: ClusterSpec) -> Strategy:
    """Every variable in merge group 0 with a ring collective."""
    shards = (CollectiveSync(group=0),)
    return _strategy(
        "allreduce-single",
        model,
        cluster,
        [VariableStrategy(variable=v.name, shards=shards) for v in model.variables],
    )


def _strategy(name: str, model: ModelSpec, cluster: ClusterSpec, subs: list[VariableStrategy]) -> Strategy:
    return Strategy(name=name, model=model.name, cluster=cluster.name, variables=tuple(subs))


def _tuned(
    build: Callable[[optuna.Trial], Strategy],
    model: ModelSpec,
    cluster: ClusterSpec,
    params: CostParams,
    trials: int,
    seed: int,
) -> Strategy:
    """Minimise T_sync (T = max(T_comp, T_sync) and T_comp is fixed) over ``build``'s knobs with TPE."""
    import optuna  # imported here: it takes about a second, and only tuning needs it

    ma, ca = model_arrays(model), cluster_arrays(cluster)
    best: dict[int, Strategy] = {}

    def objective(trial: optuna.Trial) -> float:
        s = build(trial)
        best[trial.number] = s
        return float(score(ma, ca, encode(ma, ca, [s]), params).t_sync[0])

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=max(trials, 1))
    return best[study.best_trial.number]
