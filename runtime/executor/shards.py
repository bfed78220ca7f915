"""Shard tensors: each shard's parameter view and gradient, in real or replay compute.

``param(s)`` is a view into the parameter the optimizer updates in place; ``dense_grad(s)`` a
flat gradient; ``sparse_grad(s)`` row indices (local to the shard) and rows. Real mode takes
them from the autograd gradients of a list of parameters (:class:`SpecNet`'s, or the user's
module's through ``runtime.apply``); replay mode from fixed synthetic buffers whose sizes are the
shard's real sizes divided by the scale factor.

What a synchronised gradient does is the shards' choice (``dense_update`` / ``sparse_update``):
the trials apply SGD with the trial's ``lr`` to the parameter (the default); ``RealShards`` with
``write_grads=True`` (the user's module) writes the averaged gradient into ``param.grad`` instead
(a copy, as DDP's default ``gradient_as_bucket_view=False``) and leaves the step to the user's
optimizer, as DDP does.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import torch

from runtime.executor.model import SpecNet
from runtime.executor.plan import ShardInfo, SyncPlan
from simulator.spec import CollectiveSync, comm

Update = Callable[[], object]  # applied after backward; the result is ignored


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

    def dense_update(self, s: int, avg: torch.Tensor, lr: float, divisor: int = 1) -> Update:
        """What to do, after backward, with shard ``s``'s averaged gradient ``avg / divisor`` (SGD by
        default). ``avg`` is the caller's to overwrite (the division may happen in place in it)."""
        param = self.param(s)
        if divisor == 1:
            return lambda: param.sub_(avg.view(param.shape).to(param.device), alpha=lr)
        return lambda: param.sub_(avg.div_(divisor).view(param.shape).to(param.device), alpha=lr)

    def sparse_update(self, s: int, idx: torch.Tensor, rows: torch.Tensor, world: int, lr: float) -> Update:
        """The same for a sparse shard: ``rows`` summed over ``world`` workers at local rows ``idx``."""
        param = self.param(s)
        return lambda: param.index_add_(0, idx.to(param.device), rows.to(param.device), alpha=-lr / world)


class RealShards(ShardTensors):
    """Shards of real parameters (forward order, one per plan variable) and their autograd gradients.

    ``write_grads=False`` (the trials): every iteration starts with no gradients and an update is
    SGD on the parameter. ``write_grads=True`` (``runtime.apply``): gradients are the user's (the
    optimizer zeroes them), and an update writes the averaged gradient into ``param.grad``, dense
    shards by copy into the shard's slice, sparse ones as a sparse COO gradient (or into a dense
    gradient if autograd produced a dense one); the ``lr`` argument is then unused.
    """

    def __init__(
        self, plan: SyncPlan, params: SpecNet | Sequence[torch.Tensor], write_grads: bool = False
    ) -> None:
        super().__init__(plan)
        self.params: list[torch.Tensor] = list(params.params if isinstance(params, SpecNet) else params)
        self.write_grads = write_grads
        self._coalesced: dict[int, torch.Tensor] = {}
        self._was_sparse: dict[int, bool] = {}
        self._reset: set[int] = set()

    def _narrow(self, t: torch.Tensor, info: ShardInfo) -> torch.Tensor:
        return t.narrow(info.axis, info.offset, info.shape[info.axis])

    def param(self, s: int) -> torch.Tensor:
        info = self.plan.shards[s]
        view = self._narrow(self.params[info.var_index].detach(), info)
        return view.view(info.rows, -1) if info.sparse else view

    def dense_grad(self, s: int) -> torch.Tensor:
        info = self.plan.shards[s]
        grad = self.params[info.var_index].grad
        if grad is None:
            return torch.zeros(info.numel, device=self.params[info.var_index].device)
        if grad.is_sparse:
            grad = grad.to_dense()
        # No copy where the shard is contiguous: every caller copies (a fused buffer, PS's CPU
        # clone) or computes a new tensor (PowerSGD's M + error) before anything writes a gradient.
        return self._narrow(grad, info).contiguous().view(-1)

    def sparse_grad(self, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        info = self.plan.shards[s]
        var = self.params[info.var_index]
        if info.var_index not in self._coalesced:
            grad = var.grad
            self._was_sparse[info.var_index] = grad is None or grad.is_sparse
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
        self._reset.clear()
        if not self.write_grads:
            for p in self.params:
                p.grad = None

    def dense_update(self, s: int, avg: torch.Tensor, lr: float, divisor: int = 1) -> Update:
        if not self.write_grads:
            return super().dense_update(s, avg, lr, divisor)
        info = self.plan.shards[s]
        var = self.params[info.var_index]

        def write() -> None:
            # A copy, never a view of the synchronised buffer: the engine reuses its buffers across
            # iterations (as DDP's default, gradient_as_bucket_view=False, copies bucket -> grad).
            if var.grad is None or var.grad.is_sparse:
                var.grad = torch.empty_like(var) if info.shape == tuple(var.shape) else torch.zeros_like(var)
            out = self._narrow(var.grad, info)
            # One pass: divide straight into the gradient (the division of the old two-pass code).
            torch.div(avg.view(info.shape).to(var.device), divisor, out=out)

        return write

    def sparse_update(self, s: int, idx: torch.Tensor, rows: torch.Tensor, world: int, lr: float) -> Update:
        if not self.write_grads:
            return super().sparse_update(s, idx, rows, world, lr)
        info = self.plan.shards[s]
        vi = info.var_index
        var = self.params[vi]
        if info.axis != 0:
            raise ValueError(f"variables.{info.variable}: a sparse variable is partitioned by rows only")

        def write() -> None:
            at = idx.to(var.device) + info.offset
            avg = rows.to(var.device).reshape(-1, *var.shape[1:]) / world
            if self._was_sparse.get(vi, True):
                piece = torch.sparse_coo_tensor(at.unsqueeze(0), avg, var.shape, check_invariants=False)
                var.grad = piece if vi not in self._reset or var.grad is None else var.grad + piece
            else:
                if vi not in self._reset or var.grad is None:
                    var.grad = torch.zeros_like(var)
                var.grad.index_add_(0, at, avg)
            self._reset.add(vi)

        return write


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
