"""Shard tensors: each shard's parameter view and gradient, in real or replay compute.

``param(s)`` is a view into the parameter the optimizer updates in place; ``dense_grad(s)`` a
flat gradient; ``sparse_grad(s)`` row indices (local to the shard) and rows. Real mode takes
them from the autograd gradients of :class:`SpecNet`; replay mode from fixed synthetic buffers
whose sizes are the shard's real sizes divided by the scale factor.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch

from runtime.executor.model import SpecNet
from runtime.executor.plan import ShardInfo, SyncPlan
from simulator.spec import CollectiveSync, comm


def powersgd_rank(info: ShardInfo) -> int | None:
    """The approximation rank if PowerSGD compresses this shard, else None (sent uncompressed).

    The rule is ``simulator.spec.comm.powersgd_rank``, shared with the cost model: compress
    whenever that sends fewer elements (torch's hook defaults to a minimum rate of 2; the
    strategy asked for compression, so it is kept wherever it saves anything).
    """
    sync = info.sync
    if not isinstance(sync, CollectiveSync) or sync.compressor.kind != "powersgd" or info.sparse:
        return None
    if len(info.shape) < 2:
        return None
    n, m = info.matrix
    return comm.powersgd_rank(n, m, sync.compressor.rank or 1)


def replay_shape(info: ShardInfo, scale: float) -> tuple[int, ...]:
    """The shard's parameter shape in replay mode: its real bytes divided by ``scale``."""
    if info.sparse:
        return (max(1, math.ceil(info.rows / scale)), info.row_numel)
    rank = powersgd_rank(info)
    if rank is not None:
        # PowerSGD sends (n + m) * r elements: scale both sides (the matrix itself is never sent).
        n, m = info.matrix
        return (max(rank, math.ceil(n / scale)), max(rank, math.ceil(m / scale)))
    return (max(1, math.ceil(info.numel / scale)),)


class ShardTensors(ABC):
    """Access to the shards' parameters and gradients of one process."""

    def __init__(self, plan: SyncPlan) -> None:
        self.plan = plan

    @abstractmethod
    def param(self, s: int) -> torch.Tensor:
        """A view the optimizer updates in place (sparse shards: ``[rows, row_numel]``)."""

    @abstractmethod
    def dense_grad(self, s: int) -> torch.Tensor:
        """The shard's gradient as a new flat tensor (numel of ``param(s)``)."""

    @abstractmethod
    def sparse_grad(self, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row indices (int64, local to the shard) and rows ``[k, row_numel]`` of the gradient."""

    def new_iteration(self) -> None:  # noqa: B027 - a hook most implementations do not need
        """Forget per-iteration caches."""


class RealShards(ShardTensors):
    """Shards of a real :class:`SpecNet`'s parameters and autograd gradients."""

    def __init__(self, plan: SyncPlan, net: SpecNet) -> None:
        super().__init__(plan)
        self.net = net
        self._coalesced: dict[int, torch.Tensor] = {}

    def _narrow(self, t: torch.Tensor, info: ShardInfo) -> torch.Tensor:
        return t.narrow(info.axis, info.offset, info.shape[info.axis])

    def param(self, s: int) -> torch.Tensor:
        info = self.plan.shards[s]
        view = self._narrow(self.net.params[info.var_index].detach(), info)
        return view.view(info.rows, -1) if info.sparse else view

    def dense_grad(self, s: int) -> torch.Tensor:
        info = self.plan.shards[s]
        grad = self.net.params[info.var_index].grad
        if grad is None:
            return torch.zeros(info.numel, device=self.net.params[info.var_index].device)
        if grad.is_sparse:
            grad = grad.to_dense()
        return self._narrow(grad, info).contiguous().view(-1).clone()

    def sparse_grad(self, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        info = self.plan.shards[s]
        var = self.net.params[info.var_index]
        if info.var_index not in self._coalesced:
            grad = var.grad
            if grad is None:
                grad = torch.sparse_coo_tensor(
                    torch.zeros(1, 0, dtype=torch.long), torch.zeros(0, *var.shape[1:]), var.shape
                )
            elif not grad.is_sparse:
                grad = grad.to_sparse(1)
            self._coalesced[info.var_index] = grad.coalesce()
        g = self._coalesced[info.var_index]
        idx = g.indices()[0]
        keep = (idx >= info.offset) & (idx < info.offset + info.rows)
        rows = g.values()[keep].reshape(-1, info.row_numel).contiguous()
        return (idx[keep] - info.offset).contiguous(), rows

    def new_iteration(self) -> None:
        self._coalesced.clear()
        for p in self.net.params:
            p.grad = None


class ReplayShards(ShardTensors):
    """Synthetic shards of the scaled replay sizes; gradients are fixed random buffers."""

    def __init__(self, plan: SyncPlan, scale: float, seed: int, rank: int, device: torch.device) -> None:
        super().__init__(plan)
        gen = torch.Generator().manual_seed(seed * 7919 + rank)
        self._params: list[torch.Tensor] = []
        self._dense: dict[int, torch.Tensor] = {}
        self._sparse: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for info in plan.shards:
            shape = replay_shape(info, scale)
            self._params.append(torch.zeros(shape, device=device))
            if info.sparse:
                rows = shape[0]
                k = min(rows, max(1, round(rows * info.density)))
                idx = torch.randperm(rows, generator=gen)[:k].sort().values
                self._sparse[info.id] = (idx.to(device), torch.randn(k, shape[1], generator=gen).to(device))
            else:
                self._dense[info.id] = torch.randn(math.prod(shape), generator=gen).to(device)

    def param(self, s: int) -> torch.Tensor:
        return self._params[s]

    def dense_grad(self, s: int) -> torch.Tensor:
        return self._dense[s]

    def sparse_grad(self, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._sparse[s]


def server_initial_param(plan: SyncPlan, s: int, net: SpecNet | None, scale: float) -> torch.Tensor:
    """The starting value of shard ``s`` on its PS server (same as every worker's)."""
    info = plan.shards[s]
    if net is None:
        return torch.zeros(replay_shape(info, scale))
    view = net.params[info.var_index].detach().narrow(info.axis, info.offset, info.shape[info.axis])
    view = view.cpu().clone()
    return view.view(info.rows, -1) if info.sparse else view
