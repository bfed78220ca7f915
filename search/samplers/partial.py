"""Partial strategies: every choice of the Space drawn factor by factor, placement and groups left open.

AutoSync §6: "the strategy sampler first generates a partial strategy S, leaving two fields,
variable placement (PS-based) and the group (collective-based) undecided". Both samplers draw the
partial strategy here and differ only in how they fill those two fields.

How factors are drawn (``Prior``):

- flat: every factor independently and uniformly (a partitionable variable is split with
  probability 1/2, axis and shard count then uniform; each shard is PS with probability 1/2, then
  local replication 1/2, or a compressor kind uniform among those it accepts, PowerSGD rank
  uniform, algorithm uniform; N uniform in 1..max_groups).
- hierarchical (default): the same, except that the probabilities are themselves drawn once per
  strategy — p_split, p_ps, p_replication ~ U(0, 1), compressor-kind and algorithm weights
  ~ Dirichlet(1, ..., 1) — and then used for every variable and shard. Each factor's
  marginal is unchanged (still 1/2, or uniform), but the choices of one strategy are correlated.
  Why: with independent fair coins a 200-variable model's strategy is almost surely a ~50/50 mix
  of PS and collective shards with every compressor present; coherent strategies (all collective,
  all PS, everything compressed — where hand-tuned systems like Horovod live) have probability
  ~2^-200 and are never sampled. Under the hierarchical prior they are common, and the space is
  the same (every strategy keeps a positive probability).

Neither is uniform over the *set* of strategies: that measure puts almost all mass on the largest
shard counts, since a variable's number of sub-strategies grows exponentially with its shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

from search.space import Space
from simulator.spec import (
    CollectiveSync,
    Compressor,
    Partition,
    PSSync,
    Strategy,
    Synchronizer,
    VariableStrategy,
)

NO_COMPRESSION = Compressor()


@cache
def _ps(server: str, local_replication: bool) -> PSSync:
    # synchronisers are frozen: one object per distinct value saves most of the validation cost
    return PSSync(server=server, local_replication=local_replication)


@cache
def _collective(group: int, compressor: Compressor, algorithm: str) -> CollectiveSync:
    return CollectiveSync(group=group, compressor=compressor, algorithm=algorithm)


@cache
def _partition(axis: int, shards: int) -> Partition:
    return Partition(axis=axis, shards=shards)


@dataclass
class ShardDraft:
    """One shard's drawn choices; ``server`` / ``group`` are filled later (-1 = undecided)."""

    variable: int  # variable index, forward order
    message_bytes: float
    ps: bool
    local_replication: bool = False
    compressor: Compressor = NO_COMPRESSION
    algorithm: str = "ring"
    server: int = -1
    group: int = -1


@dataclass
class PartialStrategy:
    """Per variable its partition and shard drafts (forward order), and the merge-group count N."""

    partitions: list[Partition]
    shards: list[list[ShardDraft]]
    n_groups: int

    def ps_shards(self) -> list[ShardDraft]:
        return [s for var in self.shards for s in var if s.ps]

    def collective_shards_backprop(self) -> list[ShardDraft]:
        """Collective shards in back-propagation order: exactly the reverse of ``Strategy.shards``.

        Gradients become ready from the loss towards the input; Algorithm 2's "back-propagation
        order" is read as that order (its text's "from input to loss" would be forward order,
        which gives the same kind of adjacent byte-balanced split with the boundaries placed from
        the other end).
        """
        return [s for var in reversed(self.shards) for s in reversed(var) if not s.ps]


Prior = Literal["flat", "hierarchical"]


def draw_partial(space: Space, rng: np.random.Generator, prior: Prior = "hierarchical") -> PartialStrategy:
    """Draw every factor but placement and merge group (module docstring: the two priors)."""
    partitions: list[Partition] = []
    shards: list[list[ShardDraft]] = []
    algorithms = space.config.algorithms
    kinds = space.config.compressors
    if prior == "hierarchical":
        p_split, p_ps, p_rep = rng.random(3).tolist()
        kind_weight = dict(zip(kinds, rng.dirichlet(np.ones(len(kinds))).tolist(), strict=True))
        alg_weight = rng.dirichlet(np.ones(len(algorithms))).tolist()
    elif prior == "flat":
        p_split = p_ps = p_rep = 0.5
        kind_weight = dict.fromkeys(kinds, 1.0)
        alg_weight = [1.0] * len(algorithms)
    else:
        raise ValueError(f"prior: unknown {prior!r}; expected 'flat' or 'hierarchical'")
    # uniforms drawn in blocks (numpy calls per factor would dominate); u < p is a Bernoulli(p),
    # int(u * n) a uniform choice among n
    per_var = rng.random((len(space.variables), 3)).tolist()
    per_shard = iter(rng.random((space.max_shard_count, 4)).tolist())
    for vs, (u_split, u_axis, u_k) in zip(space.variables, per_var, strict=True):
        if vs.partitionable and u_split < p_split:
            axes = sorted(vs.k_max)
            axis = axes[int(u_axis * len(axes))]
            part = _partition(axis, 2 + int(u_k * (vs.k_max[axis] - 1)))
        else:
            part = _partition(0, 1)
        drafts = []
        for layout in space.layout(vs, part.axis, part.shards):
            u_ps, u_a, u_b, u_c = next(per_shard)
            d = ShardDraft(vs.index, layout.message_bytes, ps=u_ps < p_ps)
            if d.ps:
                d.local_replication = u_a < p_rep
            else:
                options = _pick(layout.by_kind, kind_weight, u_a)
                d.compressor = options[int(u_c * len(options))]
                d.algorithm = _choose(algorithms, alg_weight, u_b)
            drafts.append(d)
        partitions.append(part)
        shards.append(drafts)
    n_cc = sum(1 for var in shards for s in var if not s.ps)
    n_groups = int(rng.integers(1, space.max_groups(n_cc) + 1))
    return PartialStrategy(partitions, shards, n_groups)


def _choose(items: tuple[str, ...], weights: list[float], u: float) -> str:
    """The item drawn with probability proportional to ``weights`` from a uniform ``u``."""
    target, acc = u * sum(weights), 0.0
    for item, w in zip(items, weights, strict=True):
        acc += w
        if target < acc:
            return item
    return items[-1]


def _pick(
    by_kind: dict[str, tuple[Compressor, ...]], weight: dict[str, float], u: float
) -> tuple[Compressor, ...]:
    """The options of the compressor kind drawn from ``weight`` (restricted to available kinds)."""
    total = sum(weight[k] for k in by_kind)
    acc = 0.0
    for k, options in by_kind.items():
        acc += weight[k]
        if u * total < acc:
            return options
    return options


def assemble(space: Space, partial: PartialStrategy, name: str = "") -> Strategy:
    """The Strategy of a partial strategy whose placement and groups are all decided."""
    variables = []
    for vs, part, drafts in zip(space.variables, partial.partitions, partial.shards, strict=True):
        syncs: list[Synchronizer] = []
        for d in drafts:
            if d.ps:
                if d.server < 0:
                    raise ValueError(f"{vs.name}: a PS shard has no server")
                syncs.append(_ps(space.servers[d.server], d.local_replication))
            else:
                if d.group < 0:
                    raise ValueError(f"{vs.name}: a collective shard has no group")
                syncs.append(_collective(d.group, d.compressor, d.algorithm))
        # model_construct: the parts are validated objects and len(shards) == partition.shards by
        # construction (Strategy.check in every sampler test confirms it); saves ~a third of a draw.
        variables.append(
            VariableStrategy.model_construct(variable=vs.name, partition=part, shards=tuple(syncs))
        )
    return Strategy(name=name, model=space.model.name, cluster=space.cluster.name, variables=tuple(variables))
