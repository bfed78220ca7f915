"""Parametrisations of the strategy space for black-box optimisers (Optuna's TPE and CMA-ES).

Per-variable categorical (TPE). The ``head`` largest variables (by gradient bytes, default 24)
each get their own choices; every other variable shares one "rest" set (they are small, and a
choice per tensor would give TPE hundreds of mostly irrelevant dimensions):
  ``shards`` in {1, 2, 4, 8, 16} up to k_max on the variable's most divisible axis (rest: 1) ·
  ``sync`` ps | collective · if ps: ``server`` (shard i of the variable goes to the server i
  places after it, round robin) and ``replication`` · if collective: ``group`` in 0..max_groups-1,
  ``compressor`` (any the variable accepts; a shard it does not fit falls back to none) and
  ``algorithm``. No knowledge constraints: servers and groups are free choices.

Compact continuous (CMA-ES), nine numbers in [0, 1]:
  ``ps_bytes``      variables, largest first, go to PS until this fraction of the bytes is on PS
  ``sparse_on_ps``  >= 0.5: sparse (embedding) variables go to PS whatever their rank
  ``partition``     log-scale threshold between 2 x min_shard_bytes and the largest variable:
                    PS variables at least this big are partitioned ...
  ``shards``        ... into 2 .. max_shards shards (linear, clipped to the variable's k_max)
  ``replication``   >= 0.5: local replication on every PS shard
  ``groups``        number of merge groups N, log-scale in 1 .. max_groups
  ``compress``      < 1/3 none, < 2/3 fp16, else PowerSGD on every collective shard that takes it
  ``rank``          PowerSGD rank index into ``powersgd_ranks``
  ``hierarchical``  >= 0.5: hierarchical all-reduce, else ring
The two fields such a summary cannot express are filled by AutoSync's constraints in their
deterministic form: placement by Algorithm 1 at temperature 0, groups by Algorithm 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import optuna

from search.constraints import adjacent_merge, load_balance
from search.samplers.partial import PartialStrategy, ShardDraft, assemble
from search.space import Space, VariableSpace, shard_message_bytes
from simulator.spec import Compressor, Partition, Strategy

COMPACT_PARAMS = (
    "ps_bytes",
    "sparse_on_ps",
    "partition",
    "shards",
    "replication",
    "groups",
    "compress",
    "rank",
    "hierarchical",
)


def _label(c: Compressor) -> str:
    return f"powersgd-{c.rank}" if c.kind == "powersgd" else c.kind


def _best_axis(vs: VariableSpace) -> int:
    return max(vs.k_max, key=lambda a: (vs.k_max[a], -a)) if vs.k_max else 0


def _fit_compressor(space: Space, vs: VariableSpace, shape: tuple[int, ...], label: str) -> Compressor:
    for c in space.compressors(vs.variable, shape):
        if _label(c) == label:
            return c
    return Compressor()


class CategoricalParametrisation:
    """Per-variable categorical choices, suggested define-by-run on an Optuna trial (TPE)."""

    def __init__(self, space: Space, head: int = 24) -> None:
        self.space = space
        by_size = sorted(space.variables, key=lambda vs: -vs.variable.grad_bytes)
        self.head = {vs.index for vs in by_size[:head]}

    def decode(self, trial: optuna.Trial) -> Strategy:
        sp = self.space
        partitions: list[Partition] = []
        shards: list[list[ShardDraft]] = []
        rest_server = 0
        for vs in sp.variables:
            key = f"v{vs.index}" if vs.index in self.head else "rest"
            axis = _best_axis(vs)
            k = 1
            if key != "rest" and vs.partitionable:
                counts = [1] + [c for c in (2, 4, 8, 16) if c <= vs.k_max[axis]]
                k = int(trial.suggest_categorical(f"{key}.shards", counts))
            part = Partition(axis=axis if k > 1 else 0, shards=k)
            ps = trial.suggest_categorical(f"{key}.sync", ["ps", "collective"]) == "ps"
            drafts = []
            if ps:
                server = sp.servers.index(str(trial.suggest_categorical(f"{key}.server", list(sp.servers))))
                rep = bool(trial.suggest_categorical(f"{key}.replication", [False, True]))
                if key == "rest":
                    server, rest_server = (server + rest_server) % len(sp.servers), rest_server + 1
                for i, shape in enumerate(part.shard_shapes(vs.variable.shape)):
                    drafts.append(
                        ShardDraft(
                            vs.index,
                            shard_message_bytes(vs.variable, shape),
                            ps=True,
                            local_replication=rep,
                            server=(server + i) % len(sp.servers),
                        )
                    )
            else:
                group = int(trial.suggest_categorical(f"{key}.group", list(range(sp.config.max_groups))))
                labels = sorted({_label(c) for c in sp.compressors(vs.variable, vs.variable.shape)})
                if key == "rest":
                    labels = ["none", "fp16", *(f"powersgd-{r}" for r in sp.config.powersgd_ranks)]
                label = str(trial.suggest_categorical(f"{key}.compressor", labels))
                alg = str(trial.suggest_categorical(f"{key}.algorithm", list(sp.config.algorithms)))
                for shape in part.shard_shapes(vs.variable.shape):
                    drafts.append(
                        ShardDraft(
                            vs.index,
                            shard_message_bytes(vs.variable, shape),
                            ps=False,
                            compressor=_fit_compressor(sp, vs, shape, label),
                            algorithm=alg,
                            group=group,
                        )
                    )
            partitions.append(part)
            shards.append(drafts)
        return assemble(sp, PartialStrategy(partitions, shards, sp.config.max_groups))


class CompactParametrisation:
    """Nine numbers in [0, 1] -> a strategy (CMA-ES's continuous relaxation; module docstring)."""

    def __init__(self, space: Space, seed: int = 0) -> None:
        self.space = space
        self.seed = seed
        self.distributions: dict[str, optuna.distributions.BaseDistribution] = {
            p: optuna.distributions.FloatDistribution(0.0, 1.0) for p in COMPACT_PARAMS
        }

    def decode(self, x: Mapping[str, float]) -> Strategy:
        sp, cfg = self.space, self.space.config
        order = sorted(sp.variables, key=lambda vs: -vs.variable.grad_bytes)
        total = sum(vs.variable.grad_bytes for vs in order) or 1.0
        on_ps: set[int] = set()
        acc = 0.0
        for vs in order:
            if acc < x["ps_bytes"] * total:
                on_ps.add(vs.index)
            acc += vs.variable.grad_bytes
        if x["sparse_on_ps"] >= 0.5:
            on_ps |= {vs.index for vs in sp.variables if vs.variable.sparse}
        lo, hi = (
            math.log(2 * cfg.min_shard_bytes),
            math.log(max(2 * cfg.min_shard_bytes, order[0].variable.bytes)),
        )
        threshold = math.exp(lo + x["partition"] * (hi - lo))
        want_shards = 2 + round(x["shards"] * (cfg.max_shards - 2))
        n_groups = max(1, round(math.exp(x["groups"] * math.log(cfg.max_groups))))
        compress = "none" if x["compress"] < 1 / 3 else "fp16" if x["compress"] < 2 / 3 else "powersgd"
        rank = cfg.powersgd_ranks[min(int(x["rank"] * len(cfg.powersgd_ranks)), len(cfg.powersgd_ranks) - 1)]
        alg = "hierarchical" if x["hierarchical"] >= 0.5 and "hierarchical" in cfg.algorithms else "ring"
        partitions: list[Partition] = []
        shards: list[list[ShardDraft]] = []
        for vs in sp.variables:
            ps = vs.index in on_ps
            axis = _best_axis(vs)
            k = (
                min(want_shards, vs.k_max[axis])
                if ps and vs.partitionable and vs.variable.bytes >= threshold
                else 1
            )
            part = Partition(axis=axis if k > 1 else 0, shards=k)
            drafts = []
            for shape in part.shard_shapes(vs.variable.shape):
                d = ShardDraft(vs.index, shard_message_bytes(vs.variable, shape), ps=ps)
                if ps:
                    d.local_replication = x["replication"] >= 0.5
                else:
                    label = f"powersgd-{rank}" if compress == "powersgd" else compress
                    d.compressor = _fit_compressor(sp, vs, shape, label)
                    if compress == "powersgd" and d.compressor.kind == "none":
                        d.compressor = _fit_compressor(sp, vs, shape, "fp16")
                    d.algorithm = alg
                drafts.append(d)
            partitions.append(part)
            shards.append(drafts)
        partial = PartialStrategy(partitions, shards, n_groups)
        ps_shards = partial.ps_shards()
        placed = load_balance(
            np.array([d.message_bytes for d in ps_shards]),
            np.array(sp.server_bandwidth),
            np.random.default_rng(self.seed),
            temperature=0.0,
        )
        for d, j in zip(ps_shards, placed, strict=True):
            d.server = int(j)
        cc = partial.collective_shards_backprop()
        for d, g in zip(cc, adjacent_merge(np.array([d.message_bytes for d in cc]), n_groups), strict=True):
            d.group = int(g)
        return assemble(sp, partial)
