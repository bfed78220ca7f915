"""Strategy: AutoSync's per-variable synchronisation strategy, plus an optional hybrid Plan.

A strategy gives every variable of a model a sub-strategy: a partition (axis, shard count) and,
per shard, a synchroniser — either a parameter server (PS) placed on a node, or a collective
(all-reduce / all-gather) in a merge group with a compressor and an algorithm. This is the space
of AutoSync supplementary §2-§3 and §6.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.spec.cluster import ClusterSpec
from simulator.spec.errors import Issue, SpecError, structural
from simulator.spec.limits import LIMITS, Label, Name
from simulator.spec.model import DTYPE_BYTES, ModelSpec, Variable
from simulator.spec.plan import Plan, plan_issues


class Compressor(BaseModel):
    """Gradient compression c_i: none, fp16 (half the bytes) or PowerSGD of a given rank."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["none", "fp16", "powersgd"] = "none"
    rank: int | None = Field(
        None, ge=1, le=LIMITS.powersgd_rank, description="PowerSGD rank; required for powersgd only."
    )

    @model_validator(mode="after")
    def _check(self) -> Compressor:
        if self.kind == "powersgd" and self.rank is None:
            structural([Issue(("rank",), "is required for powersgd")])
        if self.kind != "powersgd" and self.rank is not None:
            structural([Issue(("rank",), f"must be unset for compressor {self.kind!r}")])
        return self


class PSSync(BaseModel):
    """Synchronise a shard through a parameter server on node ``server``.

    ``local_replication`` is AutoSync's I_p (hierarchical reduction): the GPUs of one node reduce
    their gradients locally first and one message per node crosses the network. ``staleness`` is
    the bound of stale-synchronous parallel; 0 is fully synchronous.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["ps"] = "ps"
    server: Name = Field(description="Node name that hosts this shard's server.")
    local_replication: bool = Field(False, description="Reduce inside each node before pushing.")
    staleness: int = Field(
        0, ge=0, le=LIMITS.staleness, description="SSP staleness bound in steps; 0 = synchronous."
    )


class CollectiveSync(BaseModel):
    """Synchronise a shard with a collective in merge group ``group``.

    Dense gradients use all-reduce; sparse gradients use all-gather (of indices and rows). All
    shards in one group are fused into one flat buffer and one collective call.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["collective"] = "collective"
    group: int = Field(
        0, ge=0, le=LIMITS.merge_group, description="Merge group id; one collective per group."
    )
    compressor: Compressor = Field(default_factory=Compressor)
    algorithm: Literal["ring", "hierarchical"] = Field("ring", description="All-reduce algorithm.")


Synchronizer = Annotated[PSSync | CollectiveSync, Field(discriminator="kind")]


class Partition(BaseModel):
    """Split a variable along ``axis`` into ``shards`` near-equal parts (the first ones 1 larger)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    axis: int = Field(0, ge=0, lt=LIMITS.shape_rank)
    shards: int = Field(1, ge=1, le=LIMITS.shards_per_variable)

    def shard_shapes(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        n, r = divmod(shape[self.axis], self.shards)
        sizes = [n + (1 if i < r else 0) for i in range(self.shards)]
        return tuple((*shape[: self.axis], s, *shape[self.axis + 1 :]) for s in sizes)


class VariableStrategy(BaseModel):
    """The sub-strategy s_i of one variable: its partition and one synchroniser per shard."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    variable: Name
    partition: Partition = Field(default_factory=Partition)
    shards: tuple[Synchronizer, ...] = Field(
        min_length=1, max_length=LIMITS.shards_per_variable, fail_fast=True
    )

    @model_validator(mode="after")
    def _check(self) -> VariableStrategy:
        if len(self.shards) != self.partition.shards:
            structural(
                [
                    Issue(
                        ("shards",),
                        f"has {len(self.shards)} synchronisers but partition.shards is "
                        f"{self.partition.shards}",
                    )
                ]
            )
        return self


class Shard(BaseModel):
    """One (possibly whole) piece of a variable with its synchroniser; a node of the transformed graph."""

    model_config = ConfigDict(frozen=True)

    variable: str
    index: int
    shape: tuple[int, ...]
    bytes: int
    grad_bytes: float
    sparse: bool
    sync: Synchronizer
    var_index: int  # the variable's position in forward order


class Strategy(BaseModel):
    """A complete synchronisation strategy for one model on one cluster.

    Pydantic validation checks what the strategy alone can tell; ``check(model, cluster)`` checks it
    against a model and a cluster (every variable covered once, shards fit, servers exist, ...).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["strategy"] = "strategy"
    name: Label = Field("", description="Optional label, e.g. 'horovod'.")
    model: Name | None = Field(None, description="Zoo name of the model this strategy is for.")
    cluster: Name | None = Field(None, description="Zoo name of the cluster this strategy is for.")
    variables: tuple[VariableStrategy, ...] = Field(min_length=1, max_length=LIMITS.variables, fail_fast=True)
    plan: Plan | None = Field(None, description="Hybrid (pipeline/tensor) parallel plan, roadmap 2.")

    @model_validator(mode="after")
    def _check(self) -> Strategy:
        seen: set[str] = set()
        issues = []
        for i, vs in enumerate(self.variables):
            if vs.variable in seen:
                issues.append(Issue(("variables", i, "variable"), f"duplicate variable {vs.variable!r}"))
            seen.add(vs.variable)
        structural(issues)
        return self

    @cached_property
    def by_variable(self) -> dict[str, VariableStrategy]:
        return {vs.variable: vs for vs in self.variables}

    def check(self, model: ModelSpec, cluster: ClusterSpec) -> None:
        """Raise SpecError naming every field that does not fit ``model`` on ``cluster``."""
        issues = strategy_issues(self, model, cluster)
        if issues:
            raise SpecError(issues)

    def shards(self, model: ModelSpec) -> Iterator[Shard]:
        """The transformed graph's nodes V'_{G,θ}: every shard, variables in forward order."""
        for vi, var in enumerate(model.variables):
            vs = self.by_variable[var.name]
            for si, (shape, sync) in enumerate(
                zip(vs.partition.shard_shapes(var.shape), vs.shards, strict=True)
            ):
                nbytes = math.prod(shape) * DTYPE_BYTES[var.dtype]
                yield Shard(
                    variable=var.name,
                    index=si,
                    shape=shape,
                    bytes=nbytes,
                    grad_bytes=nbytes * var.density,
                    sparse=var.sparse,
                    sync=sync,
                    var_index=vi,
                )


def strategy_issues(s: Strategy, model: ModelSpec, cluster: ClusterSpec) -> list[Issue]:
    """Every reason ``s`` does not fit ``model`` on ``cluster``, with field paths."""
    issues: list[Issue] = []
    if s.model is not None and s.model != model.name:
        issues.append(Issue(("model",), f"strategy is for model {s.model!r}, not {model.name!r}"))
    if s.cluster is not None and s.cluster != cluster.name:
        issues.append(Issue(("cluster",), f"strategy is for cluster {s.cluster!r}, not {cluster.name!r}"))
    known = model.variable_index
    for i, vs in enumerate(s.variables):
        if vs.variable not in known:
            issues.append(Issue(("variables", i, "variable"), f"unknown variable {vs.variable!r}"))
            continue
        issues.extend(_variable_issues(("variables", i), vs, model.variable(vs.variable), cluster))
    covered = {vs.variable for vs in s.variables}
    for name in model.variable_index:
        if name not in covered:
            issues.append(Issue(("variables",), f"no sub-strategy for variable {name!r}"))
    if s.plan is not None:
        issues.extend(plan_issues(s.plan, model, cluster, prefix=("plan",)))
    return issues


def _variable_issues(
    path: tuple[str | int, ...], vs: VariableStrategy, var: Variable, cluster: ClusterSpec
) -> list[Issue]:
    issues: list[Issue] = []
    p = vs.partition
    if p.axis >= len(var.shape):
        issues.append(Issue((*path, "partition", "axis"), f"{p.axis} >= rank {len(var.shape)} of {var.name}"))
        return issues
    if p.shards > var.shape[p.axis]:
        issues.append(
            Issue(
                (*path, "partition", "shards"),
                f"{p.shards} shards > dimension {var.shape[p.axis]} of axis {p.axis}",
            )
        )
    if var.sparse and p.axis != 0 and p.shards > 1:
        issues.append(Issue((*path, "partition", "axis"), "a sparse variable can only be split on axis 0"))
    for j, sync in enumerate(vs.shards):
        if isinstance(sync, PSSync):
            if sync.server not in cluster.node_index:
                issues.append(Issue((*path, "shards", j, "server"), f"unknown node {sync.server!r}"))
        else:
            if sync.compressor.kind == "powersgd":
                if var.sparse:
                    issues.append(
                        Issue(
                            (*path, "shards", j, "compressor"), "powersgd cannot compress a sparse gradient"
                        )
                    )
                elif len(var.shape) < 2:
                    issues.append(
                        Issue((*path, "shards", j, "compressor"), "powersgd needs a matrix (rank >= 2)")
                    )
    return issues


def strategy_key(strategy: Strategy | Mapping[str, Any]) -> str:
    """A strategy's identity: a content hash ignoring its label and the model/cluster names it
    carries (two samplers drawing the same choices get the same key). The one definition: a
    stored strategy (its JSON object, as the service and the runtime records keep it) is
    validated first and gets the key of the Strategy it describes."""
    if not isinstance(strategy, Strategy):
        strategy = Strategy.model_validate(strategy)
    body = strategy.model_copy(update={"name": "", "model": None, "cluster": None})
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()[:16]
