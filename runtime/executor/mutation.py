"""Test-only fault injection that breaks gradient synchronisation on purpose (never set it in use).

``STRATEGIST_TEST_MUTATION`` in a worker's environment selects one mutation; unset or empty (the
default) changes nothing. It exists so that ``tests/runtime/test_sync_independent.py`` can prove
its correctness checks fail when the synchronisation is wrong (a test that cannot fail is a
defect):

- ``swap_shards``: the gradients of two dense shards with the same element count (the first such
  pair in plan order) are exchanged before they are synchronised, as a bug that writes a shard's
  gradient into another shard's place would;
- ``drop_rank``: the last worker contributes zeros (dense) and no rows (sparse), as a bug that
  loses one rank's contribution while still dividing by the full world would.

Decision: the mutations act on what a worker *contributes* (its :class:`ShardTensors`), so one
switch breaks every synchroniser (ring, hierarchical, all-gather, PS, local replication, fp16,
PowerSGD) in the same way, in real and in replay compute, without touching the sync code.
"""

from __future__ import annotations

import os
from typing import Literal, cast

import torch

from runtime.executor.plan import SyncPlan
from runtime.executor.shards import ShardTensors, Update

ENV = "STRATEGIST_TEST_MUTATION"
Mutation = Literal["swap_shards", "drop_rank"]
MUTATIONS: tuple[Mutation, ...] = ("swap_shards", "drop_rank")


def active_mutation() -> Mutation | None:
    """The mutation this process was started with, or None (ValueError for an unknown name)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    if value not in MUTATIONS:
        raise ValueError(f"{ENV}: must be one of {', '.join(MUTATIONS)} or empty, got {value!r}")
    return cast(Mutation, value)


def swap_pair(plan: SyncPlan) -> tuple[int, int] | None:
    """The first two dense shards (plan order) with equal element counts, or None."""
    seen: dict[int, int] = {}
    for info in plan.shards:
        if info.sparse:
            continue
        if info.numel in seen:
            return seen[info.numel], info.id
        seen[info.numel] = info.id
    return None


class MutatedShards(ShardTensors):
    """Wraps a worker's shards and applies one mutation to the gradients it hands to the sync."""

    def __init__(self, inner: ShardTensors, mutation: Mutation, rank: int, workers: int) -> None:
        super().__init__(inner.plan)
        self.inner = inner
        self.mutation = mutation
        self.dropped = mutation == "drop_rank" and rank == workers - 1
        pair = swap_pair(inner.plan) if mutation == "swap_shards" else None
        self.partner = {pair[0]: pair[1], pair[1]: pair[0]} if pair else {}

    def param(self, s: int) -> torch.Tensor:
        return self.inner.param(s)

    def dense_grad(self, s: int) -> torch.Tensor:
        if self.dropped:
            return torch.zeros_like(self.inner.dense_grad(s))
        return self.inner.dense_grad(self.partner.get(s, s))

    def sparse_grad(self, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx, rows = self.inner.sparse_grad(s)
        if self.dropped:
            return idx[:0], rows[:0]
        return idx, rows

    def new_iteration(self) -> None:
        self.inner.new_iteration()

    def dense_update(self, s: int, avg: torch.Tensor, lr: float, divisor: int = 1) -> Update:
        return self.inner.dense_update(s, avg, lr, divisor)

    def sparse_update(self, s: int, idx: torch.Tensor, rows: torch.Tensor, world: int, lr: float) -> Update:
        return self.inner.sparse_update(s, idx, rows, world, lr)


def maybe_mutate(tensors: ShardTensors, rank: int, workers: int) -> ShardTensors:
    """``tensors`` itself, or wrapped in the mutation the environment asks for (tests only)."""
    mutation = active_mutation()
    return tensors if mutation is None else MutatedShards(tensors, mutation, rank, workers)
