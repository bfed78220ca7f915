"""SyncPlan: a Strategy turned into the ordered communication units every process executes.

Every process derives the same plan from (model, cluster, strategy), so collectives are issued in
the same order on all ranks without any negotiation. A *unit* is one collective bucket (the
shards of one merge group that share algorithm and compressor, fused into one flat buffer) or one
PS shard (the fusion rule is ``simulator.spec.comm.unit_key``, shared with the cost model). Units are ordered by when they become ready in backward (variables become ready in
reverse forward order); a unit is launched only after every unit before it, which keeps the issue
order identical across ranks even if autograd reports gradients in a slightly different order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    ModelSpec,
    PSSync,
    Strategy,
    comm,
)


class UnsupportedStrategy(ValueError):
    """A valid strategy this executor cannot run (the trial fails with this reason)."""


@dataclass(frozen=True)
class ShardInfo:
    """One shard of one variable: where it lies in the variable and how it is synchronised."""

    id: int  # position in forward order over all shards
    var_index: int
    variable: str
    index: int  # shard index within the variable
    axis: int
    offset: int  # start along ``axis``
    shape: tuple[int, ...]
    sparse: bool
    density: float
    sync: PSSync | CollectiveSync

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def row_numel(self) -> int:
        return math.prod(self.shape[1:])

    @property
    def matrix(self) -> tuple[int, int]:
        """The 2-D view PowerSGD compresses (PyTorch's hook: ``tensor.view(shape[0], -1)``)."""
        return self.shape[0], self.numel // self.shape[0]


@dataclass(frozen=True)
class CollectiveUnit:
    """One fused collective: the shards of merge group ``group`` with one algorithm and compressor."""

    id: int
    group: int
    algorithm: str
    compressor: Compressor
    shards: tuple[int, ...]


@dataclass(frozen=True)
class PSUnit:
    """One PS shard: pushed to the server on node ``server`` and pulled back."""

    id: int
    shard: int
    server: int  # node index
    local_replication: bool


Unit = CollectiveUnit | PSUnit


@dataclass(frozen=True)
class SyncPlan:
    shards: tuple[ShardInfo, ...]
    units: tuple[Unit, ...]  # in launch order

    def unit_shards(self, unit: Unit) -> tuple[int, ...]:
        return unit.shards if isinstance(unit, CollectiveUnit) else (unit.shard,)


def unsupported_reason(strategy: Strategy) -> str | None:
    """Why this executor cannot run ``strategy`` (None if it can)."""
    if strategy.plan is not None:
        return "hybrid plans (pipeline/tensor parallel) are not supported by the executor yet"
    for vs in strategy.variables:
        for j, sync in enumerate(vs.shards):
            if isinstance(sync, PSSync) and sync.staleness > 0:
                return (
                    f"variables.{vs.variable}.shards.{j}.staleness: stale-synchronous PS "
                    f"(staleness {sync.staleness}) is not supported by the executor yet"
                )
    return None


def build_plan(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy) -> SyncPlan:
    """The shards and ordered units of ``strategy`` (which must pass ``strategy.check``)."""
    reason = unsupported_reason(strategy)
    if reason:
        raise UnsupportedStrategy(reason)
    shards: list[ShardInfo] = []
    for vi, var in enumerate(model.variables):
        vs = strategy.by_variable[var.name]
        offset = 0
        shapes = vs.partition.shard_shapes(var.shape)
        for si, (shape, sync) in enumerate(zip(shapes, vs.shards, strict=True)):
            shards.append(
                ShardInfo(
                    id=len(shards),
                    var_index=vi,
                    variable=var.name,
                    index=si,
                    axis=vs.partition.axis,
                    offset=offset,
                    shape=shape,
                    sparse=var.sparse,
                    density=var.density,
                    sync=sync,
                )
            )
            offset += shape[vs.partition.axis]
    nvars = len(model.variables)

    def ready_pos(shard_ids: tuple[int, ...]) -> int:
        # Variables become ready in reverse forward order; a unit waits for its last shard.
        return max(nvars - 1 - shards[s].var_index for s in shard_ids)

    keyed: dict[tuple[int, str, str, int | None], list[int]] = {}
    ps: list[tuple[int, PSSync]] = []
    for sh in shards:
        if isinstance(sh.sync, CollectiveSync):
            keyed.setdefault(comm.unit_key(sh.sync), []).append(sh.id)
        else:
            ps.append((sh.id, sh.sync))
    pending: list[tuple[int, int, Unit]] = []
    for (group, algorithm, kind, rank), ids in keyed.items():
        # Members in backward order (the order their gradients appear).
        members = tuple(sorted(ids, key=lambda s: (-shards[s].var_index, shards[s].index)))
        comp = Compressor(kind=kind, rank=rank)
        pending.append((ready_pos(members), 0, CollectiveUnit(0, group, algorithm, comp, members)))
    for sid, sync in ps:
        unit = PSUnit(0, sid, cluster.node_index[sync.server], sync.local_replication)
        pending.append((ready_pos((sid,)), 1, unit))
    # Order: ready position, then collectives before PS, then by first shard (deterministic).
    pending.sort(key=lambda t: (t[0], t[1], _first_shard(t[2])))
    units: list[Unit] = []
    for i, (_, _, u) in enumerate(pending):
        if isinstance(u, CollectiveUnit):
            units.append(CollectiveUnit(i, u.group, u.algorithm, u.compressor, u.shards))
        else:
            units.append(PSUnit(i, u.shard, u.server, u.local_replication))
    return SyncPlan(tuple(shards), tuple(units))


def _first_shard(u: Unit) -> int:
    return u.shards[0] if isinstance(u, CollectiveUnit) else u.shard
