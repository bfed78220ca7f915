"""Resource types with prices, the links between them, and plans that map layers to types (HeterPS).

HeterPS (Liu et al., MLSys'22 submission, Sections 4-5) schedules every layer of a model to a
*type* of computing resource (CPU cores of one server type, or GPUs of one type) and provisions
each stage with a number of units of its type. This module is the vocabulary for it:

- ``ResourceType``: one type t of unit a cluster may rent: its kind (a CPU core or a GPU), how
  many units are available (the paper's N_{t,limit}, Formula 11), the price of one unit per hour
  (p_t, Formula 8), and per-unit compute, memory and network figures from which the cost model
  derives the profiles (OCT, ODT) the paper measures.
- ``ResourceLink``: the bandwidth per unit between two types (a stage sends its boundary
  activations to the next stage over it); a pair without a link uses the smaller ``nic_gbps``.
- ``ResourcePlan``: the scheduling plan SP (Formula 9) and the provisioning plan together: stages
  are maximal runs of consecutive layers on one type, each with its number of units k_i.

Decisions: a unit is one CPU *core* or one *GPU* (the paper prices both that way, Section 6:
0.04 USD per core-hour, 2.42 USD per V100-hour); a type's figures are per unit, i.e. a server's
figures divided by its units (memory bandwidth per core, NIC share per GPU). Resource types are
an optional part of ``ClusterSpec``; a cluster without them cannot be scheduled this way.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simulator.spec.errors import Issue, structural
from simulator.spec.limits import LIMITS, Label, Name, Text

if TYPE_CHECKING:
    from simulator.spec.cluster import ClusterSpec
    from simulator.spec.model import ModelSpec


class ResourceType(BaseModel):
    """One type t of rentable unit (a CPU core of a server type, or a GPU of a GPU type)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: Name = Field(description="Unique type name, e.g. 'c5.24xlarge-core'.")
    kind: Literal["cpu", "gpu"] = Field(description="'cpu': a unit is one core; 'gpu': one GPU.")
    count: int = Field(
        ge=1, le=LIMITS.resource_units, description="Units available (N_{t,limit} of Formula 11)."
    )
    price_per_hour: float = Field(
        gt=0, le=LIMITS.price_per_hour, description="USD per unit per hour (p_t of Formula 8)."
    )
    tflops: float = Field(ge=LIMITS.min_rate, le=LIMITS.tflops, description="Peak FP32 TFLOPS of one unit.")
    memory_gb: float = Field(
        ge=LIMITS.min_rate,
        le=LIMITS.memory_gb,
        description="Memory of one unit that holds dense weights, GB.",
    )
    memory_bw_gbs: float = Field(
        ge=LIMITS.min_rate, le=LIMITS.memory_bw_gbs, description="Memory bandwidth of one unit, GB/s."
    )
    host_memory_gb: float = Field(
        ge=LIMITS.min_rate,
        le=LIMITS.host_memory_gb,
        description="Host RAM per unit, GB (sparse tables live here).",
    )
    host_link_gbps: float | None = Field(
        None,
        ge=LIMITS.min_rate,
        le=LIMITS.link_gbps,
        description="Unit-to-host-memory link (a GPU's PCIe), Gbit/s; None for a CPU core.",
    )
    nic_gbps: float = Field(
        ge=LIMITS.min_rate,
        le=LIMITS.link_gbps,
        description="Network bandwidth per unit (server NIC / units), Gbit/s.",
    )
    efficiency: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Not read by the cost model since 2026-11-25 (compute is layer_times with "
        "CostParams' per-op-class efficiencies); kept so that existing cluster specs validate.",
    )
    overhead_us: float = Field(
        10.0,
        ge=0,
        le=LIMITS.latency_us,
        description="Per-kernel dispatch time of a type without a device spec of its own (a CPU "
        "core), us: the serial part of its compute that more units do not shorten.",
    )
    instance_type: Text = Field("", description="The server it comes from, e.g. 'AWS c5.24xlarge'.")
    price_source: Text = Field("", description="Where the price comes from (page and date).")

    @model_validator(mode="after")
    def _check(self) -> ResourceType:
        if self.kind == "gpu" and self.host_link_gbps is None:
            structural([Issue(("host_link_gbps",), "a GPU type needs its link to host memory")])
        return self


class ResourceLink(BaseModel):
    """Bandwidth per unit between two resource types (either direction)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    a: Name = Field(description="A resource type name.")
    b: Name = Field(description="Another (or the same) resource type name.")
    gbps: float = Field(
        ge=LIMITS.min_rate, le=LIMITS.link_gbps, description="Bandwidth per sending unit, Gbit/s."
    )


def resource_issues(cluster: ClusterSpec) -> list[Issue]:
    """Reasons the cluster's resource types and links are inconsistent (names, duplicates)."""
    issues: list[Issue] = []
    names: set[str] = set()
    for i, t in enumerate(cluster.resource_types):
        if t.name in names:
            issues.append(Issue(("resource_types", i, "name"), f"duplicate resource type {t.name!r}"))
        names.add(t.name)
    pairs: set[frozenset[str]] = set()
    for i, link in enumerate(cluster.resource_links):
        for end in ("a", "b"):
            name = getattr(link, end)
            if name not in names:
                issues.append(Issue(("resource_links", i, end), f"unknown resource type {name!r}"))
        pair = frozenset((link.a, link.b))
        if pair in pairs:
            issues.append(Issue(("resource_links", i), f"duplicate link {link.a!r}-{link.b!r}"))
        pairs.add(pair)
    return issues


def link_gbps(cluster: ClusterSpec, a: str, b: str) -> float:
    """Bandwidth per unit between types a and b: the declared link, else the smaller NIC share."""
    for link in cluster.resource_links:
        if {link.a, link.b} == {a, b}:
            return link.gbps
    types = {t.name: t for t in cluster.resource_types}
    return min(types[a].nic_gbps, types[b].nic_gbps)


class ResourceStage(BaseModel):
    """A stage S_i: layers [first_layer, last_layer) on ``units`` units (k_i) of one resource type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    first_layer: int = Field(
        ge=0, lt=LIMITS.layers, description="Index of the stage's first layer (inclusive)."
    )
    last_layer: int = Field(
        ge=1, le=LIMITS.layers, description="Index one past the stage's last layer (exclusive)."
    )
    resource_type: Name = Field(description="Name of one of the cluster's resource types.")
    units: int = Field(
        ge=1, le=LIMITS.resource_units, description="Units of that type provisioned for the stage (k_i)."
    )

    @model_validator(mode="after")
    def _check(self) -> ResourceStage:
        if self.last_layer <= self.first_layer:
            structural([Issue(("last_layer",), f"must be > first_layer ({self.first_layer})")])
        return self


class ResourcePlan(BaseModel):
    """A scheduling plan SP (layer -> type, Formula 9) with its provisioning (units per stage).

    Stages are contiguous from layer 0 and *maximal*: two adjacent stages never share a type
    (the paper: "consecutive layers scheduled to the same type construct a stage"), so a plan
    and its per-layer assignment determine each other.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["resource_plan"] = "resource_plan"
    model: Label = Field("", description="Zoo name of the model the plan is for (checked if given).")
    cluster: Label = Field("", description="Zoo name of the cluster the plan is for (checked if given).")
    stages: tuple[ResourceStage, ...] = Field(min_length=1, max_length=LIMITS.layers, fail_fast=True)

    @model_validator(mode="after")
    def _check(self) -> ResourcePlan:
        issues: list[Issue] = []
        prev_end = 0
        for i, st in enumerate(self.stages):
            if st.first_layer != prev_end:
                issues.append(
                    Issue(("stages", i, "first_layer"), f"is {st.first_layer}, expected {prev_end}")
                )
            if i and st.resource_type == self.stages[i - 1].resource_type:
                issues.append(
                    Issue(
                        ("stages", i, "resource_type"),
                        f"same type as stage {i - 1} ({st.resource_type!r}); merge them into one stage",
                    )
                )
            prev_end = st.last_layer
        structural(issues)
        return self

    @classmethod
    def from_assignment(
        cls, types: Sequence[str], units: Sequence[int], *, model: str = "", cluster: str = ""
    ) -> ResourcePlan:
        """The plan whose layer l runs on ``types[l]``; ``units[i]`` for the i-th maximal run."""
        runs = stage_bounds(types)
        if len(units) != len(runs):
            raise ValueError(f"units: {len(units)} values for {len(runs)} stages")
        stages = tuple(
            ResourceStage(first_layer=a, last_layer=b, resource_type=types[a], units=k)
            for (a, b), k in zip(runs, units, strict=True)
        )
        return cls(model=model, cluster=cluster, stages=stages)

    @property
    def assignment(self) -> tuple[str, ...]:
        """The resource type of every layer, in forward order."""
        return tuple(st.resource_type for st in self.stages for _ in range(st.first_layer, st.last_layer))

    def units_by_type(self) -> dict[str, int]:
        """N_t(SP): units of each type the plan uses (stages of one type add up)."""
        out: dict[str, int] = {}
        for st in self.stages:
            out[st.resource_type] = out.get(st.resource_type, 0) + st.units
        return out

    def check(self, model: ModelSpec, cluster: ClusterSpec) -> None:
        """Raise SpecError naming every field that does not fit ``model`` on ``cluster``."""
        from simulator.spec.errors import SpecError

        issues = resource_plan_issues(self, model, cluster)
        if issues:
            raise SpecError(issues)


def stage_bounds(types: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Maximal runs of equal consecutive entries as [first, last) index pairs."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(types) + 1):
        if i == len(types) or types[i] != types[start]:
            runs.append((start, i))
            start = i
    return runs


def resource_plan_issues(plan: ResourcePlan, model: ModelSpec, cluster: ClusterSpec) -> list[Issue]:
    """Why ``plan`` does not fit: layer count, unknown types, units over N_{t,limit} (Formula 11)."""
    issues: list[Issue] = []
    if plan.model and plan.model != model.name:
        issues.append(Issue(("model",), f"is {plan.model!r}, checked against {model.name!r}"))
    if plan.cluster and plan.cluster != cluster.name:
        issues.append(Issue(("cluster",), f"is {plan.cluster!r}, checked against {cluster.name!r}"))
    last = len(plan.stages) - 1
    if plan.stages[last].last_layer != len(model.layers):
        issues.append(
            Issue(
                ("stages", last, "last_layer"),
                f"is {plan.stages[last].last_layer}, the model has {len(model.layers)} layers",
            )
        )
    types = {t.name: t for t in cluster.resource_types}
    if not types:
        issues.append(Issue(("cluster",), f"cluster {cluster.name!r} declares no resource types"))
        return issues
    for i, st in enumerate(plan.stages):
        if st.resource_type not in types:
            issues.append(
                Issue(("stages", i, "resource_type"), f"unknown resource type {st.resource_type!r}")
            )
    for name, used in plan.units_by_type().items():
        if name in types and used > types[name].count:
            first = next(i for i, st in enumerate(plan.stages) if st.resource_type == name)
            issues.append(
                Issue(
                    ("stages", first, "units"),
                    f"{name!r} has {types[name].count} units, the plan uses {used}",
                )
            )
    return issues
