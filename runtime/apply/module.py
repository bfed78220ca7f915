"""apply_plan: a searched sync plan applied to the user's nn.Module inside a torchrun job.

    plan = load_plan("plan.json")
    model = apply_plan(model, plan)       # after checks: joins/uses the process group
    loss_fn(model(x), y).backward()       # gradients synchronised as the plan says, overlapping backward
    optimizer.step(); optimizer.zero_grad()

Every variable is synchronised by the executor's own code (``runtime/executor``: ring and
hierarchical all-reduce, merge groups fused into one buffer per (group, algorithm, compressor),
row/column partitions, fp16 and PowerSGD compression, sparse all-gather), through
:class:`runtime.apply.sync.GradientSync`, the object the trials build too. Where this differs from
DDP: buckets are the plan's merge groups, not DDP's 25 MB buckets; PowerSGD is strategist's
re-implementation of ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`` per shard
(DDP's hook needs a ``GradBucket`` that only DDP's reducer can build), not the hook itself; sparse
gradients are all-gathered (DDP densifies them). The synchronised gradient is the average over
ranks written into ``param.grad``; the user's optimizer steps. Parameters are not broadcast from
rank 0: like the trials, every rank must build the same initial model (seed it).

``state_dict()`` / ``load_state_dict()`` are the wrapped module's own (no ``module.`` prefix), so a
checkpoint does not depend on the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from runtime.apply.checks import JobShape, check_job, check_model, check_sync_supported
from runtime.apply.sync import GradientSync
from runtime.executor.groups import CommGroups, build_groups
from runtime.executor.layout import RankLayout
from runtime.executor.plan import build_plan
from runtime.executor.shards import RealShards
from simulator.spec.planfile import PlanFile, read_plan_file


def load_plan(path: str | Path) -> PlanFile:
    """Read a plan file written by ``strategist export`` (pydantic names a bad field)."""
    return read_plan_file(path)


class PlannedModule(nn.Module):
    """The user's module with the plan's gradient synchronisation attached.

    ``forward`` is the module's; ``module`` is the user's module (parameters shared, not copied).
    """

    def __init__(self, module: nn.Module, plan: PlanFile, sync: GradientSync, groups: CommGroups) -> None:
        super().__init__()
        self.module = module
        self.plan = plan
        self.sync = sync
        self.groups = groups

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            self.sync.begin()
        return self.module(*args, **kwargs)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:  # the user's model's, unprefixed
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def close(self) -> None:
        """Stop the synchronisation threads (they are daemons; this is for tidy shutdown)."""
        self.sync.close()


def apply_plan(
    module: nn.Module,
    plan: PlanFile | str | Path,
    *,
    backend: str = "gloo",
    timeout_s: float = 600.0,
    seed: int = 0,
) -> PlannedModule:
    """Apply a sync plan to ``module`` in this process (one rank of a torchrun job).

    Checks first (model variables by name and shape, world size, this node's process count, the
    GPU this rank needs with ``backend="nccl"``) and raises :class:`~runtime.apply.checks.PlanMismatch`
    naming what differs; only then initialises the default process group if it is not yet (from
    torchrun's environment) and creates the plan's subgroups (every rank must call this together).
    Ranks are ``ClusterSpec.devices`` in order: node by node, as torchrun numbers them. ``seed``
    seeds PowerSGD's initial Q (every rank must pass the same).
    """
    pf = plan if isinstance(plan, PlanFile) else load_plan(plan)
    if pf.kind != "sync":
        raise NotImplementedError(
            f"kind: apply_plan applies sync plans; a {pf.kind} plan is not supported yet "
            "(runtime/apply/README.md says why)"
        )
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: must be 'gloo' or 'nccl', got {backend!r}")
    params = check_model(module, pf)
    check_sync_supported(pf)
    if dist.is_initialized():
        job = JobShape(dist.get_world_size(), dist.get_rank(), JobShape.from_env().local_world_size)
    else:
        job = JobShape.from_env()
    check_job(pf, job, backend)
    sync_plan = build_plan(pf.model_spec, pf.cluster, pf.strategy())
    device = params[0].device if params else torch.device("cpu")
    if backend == "nccl" and device.type != "cuda":
        raise ValueError(f"backend: nccl needs the module on a CUDA device, it is on {device}")
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    layout = RankLayout(pf.cluster, servers=False)
    groups = build_groups(layout, job.rank, backend, device)
    tensors = RealShards(sync_plan, params, write_grads=True)
    sync = GradientSync(sync_plan, tensors, groups, lr=0.0, seed=seed)
    sync.hook(params, auto_finish=True)
    return PlannedModule(module, pf, sync, groups)
