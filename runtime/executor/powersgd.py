"""PowerSGD gradient compression (Vogels et al., NeurIPS 2019, Algorithm 1), as PyTorch's DDP hook does it.

PyTorch's ``powerSGD_hook`` only runs inside DDP's reducer (it takes a ``dist.GradBucket``, which
cannot be built outside DDP), and our buckets are the strategy's merge groups, not DDP's. So the
hook's algorithm is followed step by step here, with PyTorch's own ``_orthogonalize`` (and, in
:mod:`runtime.executor.shards`, the shared rule ``simulator.spec.comm.powersgd_rank``):

    M  <- G + E                       (error feedback; E starts at 0)
    P  <- M Q                         (Q warm-started from the last step; first Q random, orthogonalised)
    P  <- all-reduce(P), orthogonalise(P)
    Q  <- all-reduce(M^T P) / world
    G' <- P Q^T                       (the averaged low-rank gradient every worker applies)
    E  <- M - G'

All P's of a unit travel in one flat all-reduce, then all Q's in another (as the hook batches a
bucket). Shapes: G, M, E ``[n, m]``; P ``[n, r]``; Q ``[m, r]`` with r = min(n, m, rank).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

from runtime.executor.plan import SyncPlan
from runtime.executor.shards import powersgd_rank


def initial_q(seed: int, shard: int, cols: int, rank: int) -> torch.Tensor:
    """The first Q of a shard, identical on every worker: random normal, then orthogonalised."""
    gen = torch.Generator().manual_seed(seed * 65_537 + shard)
    q = torch.randn(1, cols, rank, generator=gen)
    _orthogonalize(q)
    return q[0]


class PowerSGD:
    """Per-shard PowerSGD state (error and warm-start Q) of one worker for one trial."""

    def __init__(self, plan: SyncPlan, seed: int, device: torch.device) -> None:
        self.plan = plan
        self.seed = seed
        self.device = device
        self.q: dict[int, torch.Tensor] = {}
        self.error: dict[int, torch.Tensor] = {}

    def reduce(
        self,
        shards: list[int],
        grads: list[torch.Tensor],
        allreduce_: Callable[[torch.Tensor], None],
        world: int,
    ) -> list[torch.Tensor]:
        """The averaged rank-r approximation of each ``[n, m]`` gradient (two fused all-reduces)."""
        ms: list[torch.Tensor] = []
        qs: list[torch.Tensor] = []
        for s, g in zip(shards, grads, strict=True):
            rank = powersgd_rank(self.plan.shards[s])
            assert rank is not None
            if s not in self.q:
                self.q[s] = initial_q(self.seed, s, g.shape[1], rank).to(self.device)
                self.error[s] = torch.zeros_like(g)
            ms.append(g + self.error[s])
            qs.append(self.q[s])
        ps = [m @ q for m, q in zip(ms, qs, strict=True)]
        flat_p = torch.cat([p.reshape(-1) for p in ps])
        allreduce_(flat_p)
        ps = [t.view(p.shape).clone() for t, p in zip(flat_p.split([p.numel() for p in ps]), ps, strict=True)]
        for p in ps:
            _orthogonalize(p.unsqueeze(0))
        new_qs = [m.t() @ p for m, p in zip(ms, ps, strict=True)]
        flat_q = torch.cat([q.reshape(-1) for q in new_qs])
        allreduce_(flat_q)
        flat_q.div_(world)
        out: list[torch.Tensor] = []
        for s, m, p, q in zip(shards, ms, ps, flat_q.split([q.numel() for q in new_qs]), strict=True):
            q = q.view(m.shape[1], -1).clone()
            approx = p @ q.t()
            self.q[s] = q
            self.error[s] = m - approx
            out.append(approx)
        return out
