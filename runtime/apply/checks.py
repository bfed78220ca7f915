"""Plan checks: refuse a plan that does not fit this model, job or host, before any process group is used.

Each refusal is a :class:`PlanMismatch` whose message names what differs: the variable (missing,
extra, or another shape), the world size, the node's process count, or the missing device. The
checks read only the module, the plan and the launcher's environment (torchrun's ``WORLD_SIZE``,
``RANK``, ``LOCAL_WORLD_SIZE``), never a process group, so a bad plan fails before any
communication starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from simulator.spec import PSSync
from simulator.spec.planfile import PlanFile


class PlanMismatch(ValueError):
    """The plan does not fit this model, this job or this host (the message says what differs)."""


@dataclass(frozen=True)
class JobShape:
    """The job as the launcher describes it (torchrun's environment, or a running process group)."""

    world_size: int
    rank: int
    local_world_size: int | None  # processes on this node, when the launcher says

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> JobShape:
        env = os.environ if env is None else env
        try:
            world = int(env["WORLD_SIZE"])
            rank = int(env["RANK"])
        except KeyError as e:
            raise PlanMismatch(
                f"{e.args[0]}: not set; run under torchrun (or initialise torch.distributed first)"
            ) from None
        local = env.get("LOCAL_WORLD_SIZE")
        return JobShape(world, rank, int(local) if local else None)


def check_model(module: nn.Module, plan: PlanFile) -> list[nn.Parameter]:
    """The module's parameters in the plan's variable order; PlanMismatch names the first difference."""
    params = dict(module.named_parameters())
    missing = [v.name for v in plan.variables if v.name not in params]
    if missing:
        raise PlanMismatch(
            f"variable {missing[0]!r}: in the plan (model {plan.model!r}) but not in this module"
            + (f" ({len(missing)} missing in all)" if len(missing) > 1 else "")
        )
    known = {v.name for v in plan.variables}
    extra = [n for n in params if n not in known]
    if extra:
        raise PlanMismatch(
            f"variable {extra[0]!r}: in this module but not in the plan (model {plan.model!r})"
        )
    for v in plan.variables:
        have = tuple(params[v.name].shape)
        if have != v.shape:
            raise PlanMismatch(f"variable {v.name!r}: the plan has shape {v.shape}, this module {have}")
    return [params[v.name] for v in plan.variables]


def check_job(plan: PlanFile, job: JobShape, backend: str) -> None:
    """World size, this node's process count and (nccl) this host's GPUs against the plan's cluster."""
    cluster = plan.cluster
    if job.world_size != plan.world_size:
        raise PlanMismatch(
            f"world size: the plan is for {plan.world_size} processes "
            f"({len(cluster.nodes)} nodes, {cluster.num_gpus} GPUs), this job has {job.world_size}"
        )
    device = cluster.devices[job.rank]
    node = cluster.nodes[device.node]
    node_gpus = sum(1 for d in cluster.devices if d.node == device.node)
    if job.local_world_size is not None and job.local_world_size != node_gpus:
        raise PlanMismatch(
            f"node {node.name!r}: the plan runs {node_gpus} processes there (ranks in ClusterSpec.devices "
            f"order), this node runs LOCAL_WORLD_SIZE={job.local_world_size}"
        )
    if backend == "nccl":
        have = torch.cuda.device_count()
        if device.local >= have:
            raise PlanMismatch(
                f"missing device: rank {job.rank} needs cuda:{device.local} on node {node.name!r}, "
                f"this host has {have} CUDA device(s)"
            )


def check_sync_supported(plan: PlanFile) -> None:
    """Refuse what apply_plan cannot run yet, naming the shard."""
    for vs in plan.strategy().variables:
        for j, sync in enumerate(vs.shards):
            if isinstance(sync, PSSync):
                raise PlanMismatch(
                    f"variables.{vs.variable}.shards.{j}: parameter-server shards need PS server "
                    "processes, which apply_plan does not start (trials run them; see "
                    "runtime/apply/README.md); export a plan whose shards are all collective"
                )
