"""Partial strategies: every choice of the Space drawn factor by factor, placement and groups left open.

AutoSync §6: "the strategy sampler first generates a partial strategy S, leaving two fields,
variable placement (PS-based) and the group (collective-based) undecided". Both samplers draw the
partial strategy here and differ only in how they fill those two fields.

Factor-wise uniform: each factor is drawn uniformly among its options, independently (partition:
"not partitioned" with probability 1/2 when the variable is partitionable, else axis and shard
count uniform; per shard: PS or collective with probability 1/2, then local replication, or
compressor and algorithm, uniform; N uniform in 1..max_groups). This is not uniform over the
*set* of strategies: that measure puts almost all mass on the largest shard counts, since a
variable's number of sub-strategies grows exponentially with its shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

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


def draw_partial(space: Space, rng: np.random.Generator) -> PartialStrategy:
    """Draw every factor but placement and merge group, factor-wise uniformly."""
    partitions: list[Partition] = []
    shards: list[list[ShardDraft]] = []
    algorithms = space.config.algorithms
    # uniforms drawn in blocks (numpy calls per factor would dominate); u < p is a Bernoulli(p),
    # int(u * n) a uniform choice among n
    per_var = rng.random((len(space.variables), 3)).tolist()
    per_shard = iter(rng.random((space.max_shard_count, 3)).tolist())
    for vs, (u_split, u_axis, u_k) in zip(space.variables, per_var, strict=True):
        if vs.partitionable and u_split < 0.5:
            axes = sorted(vs.k_max)
            axis = axes[int(u_axis * len(axes))]
            part = _partition(axis, 2 + int(u_k * (vs.k_max[axis] - 1)))
        else:
            part = _partition(0, 1)
        drafts = []
        for layout in space.layout(vs, part.axis, part.shards):
            u_ps, u_a, u_b = next(per_shard)
            d = ShardDraft(vs.index, layout.message_bytes, ps=u_ps < 0.5)
            if d.ps:
                d.local_replication = u_a < 0.5
            else:
                d.compressor = layout.compressors[int(u_a * len(layout.compressors))]
                d.algorithm = algorithms[int(u_b * len(algorithms))]
            drafts.append(d)
        partitions.append(part)
        shards.append(drafts)
    n_cc = sum(1 for var in shards for s in var if not s.ps)
    n_groups = int(rng.integers(1, space.max_groups(n_cc) + 1))
    return PartialStrategy(partitions, shards, n_groups)


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
