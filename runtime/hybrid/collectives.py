"""The collectives of a split TaskGraph as autograd functions, and the bridges' point-to-point moves.

Why explicit ``torch.distributed`` collectives rather than ``torch.distributed.tensor`` (DTensor):
Whale balances a split TaskGraph on heterogeneous GPUs by *uneven* sharding (``split_shares``),
and DTensor's ``Shard(dim)`` placement always cuts a dimension as ``torch.chunk`` does (even, the
last piece smaller), so the shards Algorithm 1 asks for cannot be expressed as DTensors. The
bridge layers also move rows between *different* device sets (replicate devices -> split
devices), which is a point-to-point redistribution outside any one DTensor mesh. Four explicit
operators (Megatron-LM's f, g and their gather/slice pair) and one routed exchange are short,
run the same on gloo and NCCL, and let the tests see every message.

Conventions: inside a split TaskGraph a *whole* tensor is held identically by every device, and
in backward every device holds the whole, identical gradient of it; a *sharded* tensor's last
dimension is cut by the TaskGraph's split sizes.

- ``copy_to_shards`` (f): forward identity; backward all-reduce (the input feeds every shard).
- ``reduce_from_shards`` (g): forward all-reduce of partial sums; backward identity.
- ``gather_from_shards``: forward all-gather of the last dimension (uneven sizes are padded to
  the largest, as gloo's all-gather needs equal tensors); backward keeps this device's slice.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

Group = Any  # a torch.distributed ProcessGroup (or None: the single-device case)


class _Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _Reduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group) -> torch.Tensor:
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Group, sizes: tuple[int, ...], index: int) -> torch.Tensor:
        ctx.lo, ctx.hi = sum(sizes[:index]), sum(sizes[: index + 1])
        width = max(sizes)
        padded = torch.nn.functional.pad(x, (0, width - x.shape[-1])).contiguous()
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded, group=group)
        return torch.cat([p[..., :s] for p, s in zip(parts, sizes, strict=True)], dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return grad[..., ctx.lo : ctx.hi].contiguous(), None, None, None


def copy_to_shards(x: torch.Tensor, group: Group) -> torch.Tensor:
    return x if group is None else _Copy.apply(x, group)


def reduce_from_shards(x: torch.Tensor, group: Group) -> torch.Tensor:
    return x if group is None else _Reduce.apply(x, group)


def gather_from_shards(x: torch.Tensor, group: Group, sizes: tuple[int, ...], index: int) -> torch.Tensor:
    return x if group is None else _Gather.apply(x, group, sizes, index)


def exchange(sends: list[tuple[int, torch.Tensor]], recvs: list[tuple[int, torch.Tensor]], tag: int) -> None:
    """Post every send and receive of one bridge direction at once, then wait for all of them.

    Posting both sides before waiting means no ordering between pairs can deadlock; one message
    per ordered pair and bridge keeps untagged (NCCL) and tagged (gloo) matching the same.
    """
    ops = [dist.P2POp(dist.isend, t.contiguous(), peer, tag=tag) for peer, t in sends]
    ops += [dist.P2POp(dist.irecv, t, peer, tag=tag) for peer, t in recvs]
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
