"""Parameter-server synchronisation: workers push gradients and pull parameters; servers apply SGD.

Point-to-point gloo messages on CPU tensors, tagged per unit. A dense shard is one message each
way. A sparse shard is pushed as (count, indices, rows) and pulled back as the rows any worker
touched (their union), so only touched rows travel. With local replication (AutoSync's I_p) the
node's workers first reduce to the node leader (sparse: gather to it), only the leader talks to
the server, and the leader broadcasts what it pulls inside the node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from runtime.executor.groups import CommGroups
from runtime.executor.plan import PSUnit, SyncPlan
from runtime.executor.shards import ShardTensors

Update = Callable[[], object]
Work = dist.Work


def _isend(t: torch.Tensor, dst: int, tag: int, group: dist.ProcessGroup | None) -> Work:
    work = dist.isend(t, dst, tag=tag, group=group)
    assert work is not None  # None only for a rank outside the group
    return work


def _irecv(t: torch.Tensor, src: int, tag: int, group: dist.ProcessGroup | None) -> Work:
    work = dist.irecv(t, src, tag=tag, group=group)
    assert work is not None
    return work


def _tag(unit: PSUnit, k: int) -> int:
    """Message tags: 0-2 push (data or count, indices, rows), 3-5 pull (the same)."""
    return unit.id * 8 + k


def _local_group(unit: PSUnit, g: CommGroups, pull: bool) -> dist.ProcessGroup | None:
    if not unit.local_replication:
        return None
    return g.ps_pull_intra if pull else g.ps_push_intra


def _talks_to_server(unit: PSUnit, g: CommGroups) -> bool:
    return not unit.local_replication or g.is_leader


def _gather_sparse(
    idx: torch.Tensor, rows: torch.Tensor, group: dist.ProcessGroup, leader: int, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate the node's sparse gradients on the leader (others get their own back)."""
    count = torch.tensor([idx.numel()], dtype=torch.int64)
    counts = [torch.empty_like(count) for _ in range(size)]
    dist.all_gather(counts, count, group=group)
    most = int(max(int(c) for c in counts))
    width = rows.shape[1]
    pidx = torch.nn.functional.pad(idx, (0, most - idx.numel()))
    prows = torch.nn.functional.pad(rows.reshape(-1), (0, (most - idx.numel()) * width))
    is_leader = dist.get_rank() == leader
    gi = [torch.empty_like(pidx) for _ in range(size)] if is_leader else None
    gr = [torch.empty_like(prows) for _ in range(size)] if is_leader else None
    dist.gather(pidx, gi, dst=leader, group=group)
    dist.gather(prows, gr, dst=leader, group=group)
    if gi is None or gr is None:
        return idx, rows
    ks = [int(c) for c in counts]
    return (
        torch.cat([t[:k] for t, k in zip(gi, ks, strict=True)]),
        torch.cat([t[: k * width].view(k, width) for t, k in zip(gr, ks, strict=True)]),
    )


def push(unit: PSUnit, plan: SyncPlan, tensors: ShardTensors, g: CommGroups) -> list[tuple[Work, object]]:
    """Send this worker's (or node's) gradient of ``unit`` to its server; returns pending sends."""
    info = plan.shards[unit.shard]
    server = g.layout.server_rank(unit.server)
    group = _local_group(unit, g, pull=False)
    leader = g.layout.leader(g.node)
    sends: list[tuple[Work, object]] = []
    if not info.sparse:
        grad = tensors.dense_grad(unit.shard).cpu().clone()
        if group is not None:
            dist.reduce(grad, dst=leader, group=group)
        if _talks_to_server(unit, g):
            sends.append((_isend(grad, server, _tag(unit, 0), g.ps_push), grad))
        return sends
    idx, rows = (t.cpu() for t in tensors.sparse_grad(unit.shard))
    if group is not None:
        idx, rows = _gather_sparse(idx, rows, group, leader, len(g.layout.node_workers[g.node]))
    if _talks_to_server(unit, g):
        count = torch.tensor([idx.numel()], dtype=torch.int64)
        for k, t in enumerate((count, idx.contiguous(), rows.contiguous())):
            sends.append((_isend(t, server, _tag(unit, k), g.ps_push), t))
    return sends


@dataclass
class PendingPull:
    """A posted receive of a unit's parameters (dense) or of its row count (sparse)."""

    unit: PSUnit
    buf: torch.Tensor
    work: Work | None  # None where a node leader receives for this worker


def post_pull(unit: PSUnit, plan: SyncPlan, tensors: ShardTensors, g: CommGroups) -> PendingPull:
    """Post the receive of ``unit``'s answer now, so pulls from several servers arrive in
    parallel (as a PS's independent pull requests do); called in launch order by one thread."""
    sparse = plan.shards[unit.shard].sparse
    buf = torch.zeros(1, dtype=torch.int64) if sparse else torch.empty(tensors.param(unit.shard).numel())
    work = None
    if _talks_to_server(unit, g):
        work = _irecv(buf, g.layout.server_rank(unit.server), _tag(unit, 3), g.ps_pull)
    return PendingPull(unit, buf, work)


def pull(pending: PendingPull, plan: SyncPlan, tensors: ShardTensors, g: CommGroups) -> Update:
    """Wait for a posted pull (and share it in the node); returns the update of the replica."""
    unit = pending.unit
    info = plan.shards[unit.shard]
    server = g.layout.server_rank(unit.server)
    group = _local_group(unit, g, pull=True)
    leader = g.layout.leader(g.node)
    talks = _talks_to_server(unit, g)
    param = tensors.param(unit.shard)
    if pending.work is not None:
        pending.work.wait()
    if not info.sparse:
        buf = pending.buf
        if group is not None:
            dist.broadcast(buf, src=leader, group=group)
        return lambda: param.copy_(buf.view(param.shape))
    count = pending.buf
    if group is not None:
        dist.broadcast(count, src=leader, group=group)
    idx = torch.empty(int(count), dtype=torch.int64)
    rows = torch.empty(int(count), param.shape[1])
    if talks:
        dist.recv(idx, server, tag=_tag(unit, 4), group=g.ps_pull)
        dist.recv(rows, server, tag=_tag(unit, 5), group=g.ps_pull)
    if group is not None:
        dist.broadcast(idx, src=leader, group=group)
        dist.broadcast(rows, src=leader, group=group)
    return lambda: param.index_copy_(0, idx.to(param.device), rows.to(param.device))


class Server:
    """One node's parameter server: owns the PS shards placed on its node for one trial."""

    def __init__(self, plan: SyncPlan, node: int, g: CommGroups, params: dict[int, torch.Tensor], lr: float):
        self.plan = plan
        self.g = g
        self.lr = lr
        self.units = [u for u in plan.units if isinstance(u, PSUnit) and u.server == node]
        self.params = params  # shard id -> the server's copy of the shard

    def sources(self, unit: PSUnit) -> tuple[int, ...]:
        lay = self.g.layout
        return lay.leaders if unit.local_replication else tuple(range(lay.num_workers))

    def iteration(self) -> None:
        """Serve one synchronous step: every shard waits for all its pushes, steps, answers."""
        world = self.g.layout.num_workers
        posted: dict[int, list[tuple[Work, torch.Tensor]]] = {}
        for u in self.units:
            p = self.params[u.shard]
            shape = (p.numel(),) if not self.plan.shards[u.shard].sparse else (1,)
            dtype = torch.float32 if not self.plan.shards[u.shard].sparse else torch.int64
            bufs = [torch.empty(shape, dtype=dtype) for _ in self.sources(u)]
            posted[u.id] = [
                (_irecv(b, src, _tag(u, 0), self.g.ps_push), b)
                for b, src in zip(bufs, self.sources(u), strict=True)
            ]
        sends: list[tuple[Work, object]] = []
        for u in self.units:
            p = self.params[u.shard]
            for work, _ in posted[u.id]:
                work.wait()
            if not self.plan.shards[u.shard].sparse:
                total = torch.stack([b for _, b in posted[u.id]]).sum(0)
                p.sub_(total.view(p.shape), alpha=self.lr / world)
                for src in self.sources(u):
                    sends.append((_isend(p, src, _tag(u, 3), self.g.ps_pull), p))
                continue
            width = p.shape[1]
            parts = []
            for (_, count), src in zip(posted[u.id], self.sources(u), strict=True):
                k = int(count)
                idx, rows = torch.empty(k, dtype=torch.int64), torch.empty(k, width)
                parts.append(
                    (
                        _irecv(idx, src, _tag(u, 1), self.g.ps_push),
                        _irecv(rows, src, _tag(u, 2), self.g.ps_push),
                        idx,
                        rows,
                    )
                )
            for wi, wr, _, _ in parts:
                wi.wait()
                wr.wait()
            idx = torch.cat([t[2] for t in parts])
            rows = torch.cat([t[3] for t in parts])
            total = torch.zeros_like(p).index_add_(0, idx, rows)
            touched = torch.unique(idx)
            p.index_add_(0, touched, total[touched], alpha=-self.lr / world)
            out = (torch.tensor([touched.numel()], dtype=torch.int64), touched, p[touched].contiguous())
            for src in self.sources(u):
                for k, t in enumerate(out):
                    sends.append((_isend(t, src, _tag(u, 3 + k), self.g.ps_pull), t))
        for work, _ in sends:
            work.wait()
