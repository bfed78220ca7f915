"""Plan: the hybrid-parallel part of a strategy (pipeline stages, replicate/split, micro-batches).

Roadmap item 2 (Ada-Grouper kFkB schedules, HeterPS per-device batch shares, Whale's
replicate/split primitives) grows into this vocabulary; for now it is validated and round-trips,
and no cost model or executor consumes it yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.spec.errors import Issue, structural
from simulator.spec.limits import LIMITS, Name

if TYPE_CHECKING:
    from simulator.spec.cluster import ClusterSpec
    from simulator.spec.model import ModelSpec


class Stage(BaseModel):
    """A pipeline stage: layers [first_layer, last_layer) on a group of devices ('node:gpu').

    The stage's devices are ``replicate`` data-parallel copies of a ``split``-way tensor split
    (Whale's replicate/split), so ``len(devices) == replicate * split``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    first_layer: int = Field(
        ge=0, lt=LIMITS.layers, description="Index of the stage's first layer (inclusive)."
    )
    last_layer: int = Field(
        ge=1, le=LIMITS.layers, description="Index one past the stage's last layer (exclusive)."
    )
    devices: tuple[Name, ...] = Field(
        min_length=1, max_length=LIMITS.gpus, description="Devices as 'node_name:gpu_index'."
    )
    replicate: int = Field(1, ge=1, le=LIMITS.gpus, description="Data-parallel degree inside the stage.")
    split: int = Field(1, ge=1, le=LIMITS.gpus, description="Tensor-split degree inside the stage.")

    @model_validator(mode="after")
    def _check(self) -> Stage:
        issues = []
        if self.last_layer <= self.first_layer:
            issues.append(Issue(("last_layer",), f"must be > first_layer ({self.first_layer})"))
        if len(self.devices) != self.replicate * self.split:
            issues.append(
                Issue(
                    ("devices",),
                    f"has {len(self.devices)} devices but replicate x split = {self.replicate * self.split}",
                )
            )
        structural(issues)
        return self


class Plan(BaseModel):
    """A hybrid-parallel plan: stages, batch shares per device, micro-batching and the schedule.

    ``schedule='kfkb'`` is Ada-Grouper's k-forward-k-backward; ``k=1`` is 1F1B and ``k`` equal to
    the micro-batch count is GPipe (``group_size`` gives the k a schedule runs). ``batch_shares``
    maps each data-parallel entry device of the first stage to its samples per step (HeterPS /
    Whale hardware-aware balancing); the shares must sum to ``global_batch``.

    Batch arithmetic (decided for issue 17): ``num_micro_batches`` counts the micro-batches of one
    step over all data-parallel replicas, so ``global_batch = micro_batch_size x num_micro_batches``;
    every share is a whole number of micro-batches, and pipeline replica d (the d-th device of every
    stage) runs ``share_d / micro_batch_size`` of them (``replica_micro_batches``). With equal shares
    and D replicas each pipeline runs N / D micro-batches. Memory is checked in
    ``search.feasibility`` (the simulator cannot see the optimizer and memory assumptions).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stages: tuple[Stage, ...] = Field(min_length=1, max_length=LIMITS.layers, fail_fast=True)
    global_batch: int = Field(
        ge=1, le=LIMITS.global_batch, description="Samples per training step over the whole cluster."
    )
    batch_shares: dict[Name, Annotated[int, Field(le=LIMITS.global_batch)]] = Field(
        max_length=LIMITS.gpus, description="Samples per step for each device ('node:gpu')."
    )
    micro_batch_size: int = Field(ge=1, le=LIMITS.micro_batch)
    num_micro_batches: int = Field(ge=1, le=LIMITS.micro_batches)
    schedule: Literal["gpipe", "1f1b", "kfkb"] = "1f1b"
    k: int = Field(
        1, ge=1, le=LIMITS.micro_batches, description="Micro-batches per forward/backward group of kFkB."
    )

    @model_validator(mode="after")
    def _check(self) -> Plan:
        issues = []
        total = sum(self.batch_shares.values())
        if total != self.global_batch:
            issues.append(Issue(("batch_shares",), f"sum to {total} but global_batch is {self.global_batch}"))
        for dev, share in self.batch_shares.items():
            if share < 0:
                issues.append(Issue(("batch_shares", dev), f"must be >= 0, got {share}"))
        if self.k > self.num_micro_batches:
            issues.append(Issue(("k",), f"{self.k} > num_micro_batches {self.num_micro_batches}"))
        elif self.num_micro_batches % self.k:
            issues.append(Issue(("k",), f"must divide num_micro_batches {self.num_micro_batches}"))
        if self.schedule != "kfkb" and self.k != 1:
            issues.append(Issue(("k",), f"must be 1 for schedule {self.schedule!r}"))
        if self.micro_batch_size * self.num_micro_batches != self.global_batch:
            issues.append(
                Issue(
                    ("num_micro_batches",),
                    f"micro_batch_size x num_micro_batches = "
                    f"{self.micro_batch_size * self.num_micro_batches}, but global_batch is {self.global_batch}",
                )
            )
        for dev, share in self.batch_shares.items():
            if share % self.micro_batch_size:
                issues.append(
                    Issue(
                        ("batch_shares", dev),
                        f"{share} is not a multiple of micro_batch_size {self.micro_batch_size}",
                    )
                )
        prev_end = 0
        for i, st in enumerate(self.stages):
            if st.first_layer != prev_end:
                issues.append(
                    Issue(("stages", i, "first_layer"), f"is {st.first_layer}, expected {prev_end}")
                )
            prev_end = st.last_layer
        seen: dict[str, int] = {}
        for i, st in enumerate(self.stages):
            for j, d in enumerate(st.devices):
                if d in seen:
                    issues.append(Issue(("stages", i, "devices", j), f"{d} is already in stage {seen[d]}"))
                seen.setdefault(d, i)
        for dev in self.batch_shares:
            if dev not in seen:
                issues.append(Issue(("batch_shares", dev), "is not a device of any stage"))
        structural(issues)
        return self

    def replica_micro_batches(self, replica: int) -> int:
        """Micro-batches per step of pipeline replica ``replica`` (its first-stage device's share / b)."""
        return self.batch_shares.get(self.stages[0].devices[replica], 0) // self.micro_batch_size

    def group_size(self, micro_batches: int) -> int:
        """The kFkB group size a pipeline replica of ``micro_batches`` runs: 1F1B is k = 1, GPipe k = N."""
        if self.schedule == "gpipe":
            return micro_batches
        if self.schedule == "1f1b":
            return 1
        return min(self.k, micro_batches)


def plan_issues(
    plan: Plan, model: ModelSpec, cluster: ClusterSpec, prefix: tuple[str | int, ...] = ()
) -> list[Issue]:
    """Reasons ``plan`` does not fit ``model`` on ``cluster`` (layer ranges and device names)."""
    issues: list[Issue] = []
    if len(plan.stages) > len(cluster.devices):
        issues.append(
            Issue(
                (*prefix, "stages"),
                f"{len(plan.stages)} stages > {len(cluster.devices)} devices of the cluster",
            )
        )
    if plan.stages[-1].last_layer != len(model.layers):
        issues.append(
            Issue(
                (*prefix, "stages", len(plan.stages) - 1, "last_layer"),
                f"is {plan.stages[-1].last_layer}, the model has {len(model.layers)} layers",
            )
        )
    for i, st in enumerate(plan.stages):
        for j, dev in enumerate(st.devices):
            reason = device_issue(dev, cluster)
            if reason:
                issues.append(Issue((*prefix, "stages", i, "devices", j), reason))
    return issues


def device_issue(dev: str, cluster: ClusterSpec) -> str | None:
    """Why 'node:gpu' does not name a GPU of ``cluster``, or None if it does."""
    node, sep, idx = dev.rpartition(":")
    if not sep or not idx.isdigit():
        return f"{dev!r} is not 'node:gpu_index'"
    if node not in cluster.node_index:
        return f"unknown node {node!r}"
    gpus = cluster.node(node).gpus
    if int(idx) >= gpus:
        return f"node {node!r} has {gpus} GPUs, no index {idx}"
    return None
