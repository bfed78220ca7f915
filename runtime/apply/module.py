"""apply_plan: a searched plan (sync, hybrid, pipeline) applied to the user's nn.Module inside a torchrun job.

Sync and hybrid plans (below); pipeline plans: ``runtime/apply/pipeline.py``; hybrid: ``runtime/apply/hybrid.py``.

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

from runtime.apply.checks import JobShape, PlanMismatch, check_job, check_model, check_sync_supported
from runtime.apply.hybrid import allreduce_strategy, devices_in_rank_order, hybrid_plan, rank_shares
from runtime.apply.pipeline import PipelinedModule, stage_cuts, stage_ranks, user_pipeline
from runtime.apply.sync import GradientSync
from runtime.executor.groups import CommGroups, build_groups
from runtime.executor.layout import RankLayout
from runtime.executor.plan import build_plan
from runtime.executor.shards import RealShards
from runtime.worker.plan_pipeline import PipelineTrial
from simulator.spec.planfile import PlanFile, read_plan_file


def load_plan(path: str | Path) -> PlanFile:
    """Read a plan file written by ``strategist export`` (pydantic names a bad field)."""
    return read_plan_file(path)


class PlannedModule(nn.Module):
    """The user's module with the plan's gradient synchronisation attached.

    ``forward`` is the module's; ``module`` is the user's module (parameters shared, not copied).
    """

    def __init__(
        self,
        module: nn.Module,
        plan: PlanFile,
        sync: GradientSync,
        groups: CommGroups,
        shares: list[int],
        rank: int,
    ) -> None:
        super().__init__()
        self.module = module
        self.plan = plan
        self.sync = sync
        self.groups = groups
        self.shares = shares  # samples per step of every rank (sync: the spec's batch on each)
        self.global_batch = sum(shares)
        self._rank = rank

    def rows(self, global_batch: int) -> slice:
        """This rank's rows of the step's global batch (hybrid: its uneven share)."""
        if global_batch != self.global_batch:
            raise PlanMismatch(
                f"global batch: the plan is for {self.global_batch} samples per step "
                f"({self.shares} by rank), this step has {global_batch}"
            )
        start = sum(self.shares[: self._rank])
        return slice(start, start + self.shares[self._rank])

    def optim_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """``optimizer.state_dict()`` (every rank holds the same state)."""
        return optimizer.state_dict()

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
) -> PlannedModule | PipelinedModule:
    """Apply a plan to ``module`` in this process (one rank of a torchrun job).

    Checks first (model variables by name and shape, world size, this node's process count, the
    GPU this rank needs with ``backend="nccl"``, what the plan's kind cannot apply) and raises
    :class:`~runtime.apply.checks.PlanMismatch` naming what differs; only then initialises the
    default process group if it is not yet (from torchrun's environment) and creates the plan's
    subgroups (every rank must call this together). Ranks are ``ClusterSpec.devices`` in order:
    node by node, as torchrun numbers them. ``seed`` seeds PowerSGD's initial Q (every rank must
    pass the same).

    - ``sync``: a :class:`PlannedModule`; gradients synchronised during ``loss.backward()``.
    - ``hybrid`` (replicate TaskGraphs, uneven shares): a :class:`PlannedModule` whose ``rows()``
      is the rank's share and whose gradients are share-weighted (``runtime/apply/hybrid.py``).
    - ``pipeline``: a :class:`~runtime.apply.pipeline.PipelinedModule` (``step(inputs, target,
      loss_fn)``; ``runtime/apply/pipeline.py``).
    - ``heterogeneous``: refused (``runtime/apply/README.md`` says why).
    """
    pf = plan if isinstance(plan, PlanFile) else load_plan(plan)
    if pf.kind == "heterogeneous":
        raise PlanMismatch(
            "kind: a heterogeneous plan places stages on resource types with their own processes; "
            "apply_plan does not apply it (runtime/apply/README.md)"
        )
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend: must be 'gloo' or 'nccl', got {backend!r}")
    params = check_model(module, pf)
    shares: list[int] | None = None
    if pf.kind == "sync":
        check_sync_supported(pf)
        strategy = pf.strategy()
    elif pf.kind == "hybrid":
        hp = hybrid_plan(pf.plan)
        shares = rank_shares(hp, devices_in_rank_order(pf.cluster))
        strategy = allreduce_strategy([v.name for v in pf.variables])
    else:
        doc = PipelineTrial.model_validate(pf.plan)
        stage_cuts(module, pf.model_spec, doc.candidates[0])  # refused here, before any group
        stage_ranks(pf.cluster, doc.candidates[0])
    if dist.is_initialized():
        job = JobShape(dist.get_world_size(), dist.get_rank(), JobShape.from_env().local_world_size)
    else:
        job = JobShape.from_env()
    check_job(pf, job, backend)
    device = params[0].device if params else torch.device("cpu")
    if backend == "nccl" and device.type != "cuda":
        raise ValueError(f"backend: nccl needs the module on a CUDA device, it is on {device}")
    if pf.kind == "pipeline" and backend != "gloo":
        raise PlanMismatch("backend: pipeline plans are applied over gloo only (the trials' adapter)")
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    if pf.kind == "pipeline":
        engine, stage_children, ranks = user_pipeline(
            module,
            pf.model_spec,
            pf.cluster,
            doc.candidates,
            doc.start,
            doc.tuner_interval if doc.adaptive and len(doc.candidates) > 1 else None,
        )
        return PipelinedModule(module, pf, engine, stage_children, ranks)
    sync_plan = build_plan(pf.model_spec, pf.cluster, strategy)
    layout = RankLayout(pf.cluster, servers=False)
    groups = build_groups(layout, job.rank, backend, device)
    tensors = RealShards(sync_plan, params, write_grads=True)
    sync = GradientSync(sync_plan, tensors, groups, lr=0.0, seed=seed)
    if shares is None:
        per = pf.model_spec.batch_size
        shares = [per] * job.world_size
    else:  # uneven shares: rank r's mean gradient weighted by W * s_r / G before the average over W
        weight = job.world_size * shares[job.rank] / sum(shares)
        for p in params:
            p.register_hook(lambda g, w=weight: g * w)
    sync.hook(params, auto_finish=True)
    return PlannedModule(module, pf, sync, groups, shares, job.rank)
