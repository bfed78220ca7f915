"""HybridPlan: Whale's TaskGraphs on VirtualDevices with replicate/split, nested DP and micro-batches.

Whale (``whale.txt`` §3.1-3.2) writes every parallel strategy with two primitives over
*TaskGraphs* (contiguous groups of layers): ``replicate(n)`` copies a TaskGraph onto n devices,
each consuming a share of the batch (data parallelism), and ``split(n)`` shards its tensors over
n devices (tensor parallelism). A TaskGraph runs on a *VirtualDevice*, the physical GPUs it
was given. Nested data parallelism replicates the whole plan; its degree here is ``nested_dp``
and every TaskGraph lists one VirtualDevice per nested replica. Micro-batches between TaskGraphs
are the pipeline issue's: ``num_micro_batches``, ``schedule`` and ``k`` mean exactly what they
mean on ``Plan`` and ``to_plan()`` hands the pipeline cost model and runtime that ``Plan``.

Decisions where the paper is vague:

- A TaskGraph has one primitive (replicate or split); a layer range that needs both is written
  as a replicate TaskGraph inside nested DP.
- Shares: a replicate TaskGraph's ``batch_shares`` give each device its samples per step (Whale's
  intra-TaskGraph load balancing); None is the paper's even split. Shares of one nested replica's
  devices sum to that replica's batch (``replica_batches``; None: ``global_batch`` split evenly).
  A split TaskGraph's devices all see the replica's whole batch; its ``split_shares`` (None:
  even) weight how the split dimension is cut (the paper's "uneven sharding").
- VirtualDevices of different TaskGraphs may hold the same GPUs (the paper allows it: Example 2
  replicates features and splits the classifier over the same GPUs); devices of different nested
  replicas never overlap. A pipeline (``num_micro_batches > 1``) needs disjoint TaskGraphs, since
  a pipeline stage is a set of devices (``Plan``).
- Between TaskGraphs whose parallelism differs the executor inserts Whale's bridge layers
  (``runtime.hybrid``): gather in the batch dimension after replicate, in the split dimension after
  split, then scatter to what the next TaskGraph consumes.

Annotation (Whale's user API): ``replicate(n)`` and ``split(n)`` are context managers; layers
run under them in a traced forward (``trace_scopes``) or named in a per-module mapping
(``Annotation``) become TaskGraphs, and ``plan_from_annotations`` places them on a cluster's
devices in order (the paper's §3.2.1: devices taken sequentially, nested DP of
K / sum(d_i) when the cluster's K devices are a multiple).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.spec.errors import Issue, SpecError, structural
from simulator.spec.limits import LIMITS, Label, Name, SpecName
from simulator.spec.plan import Plan, Stage, device_issue, plan_issues
from simulator.spec.profile import Profile

if TYPE_CHECKING:
    from simulator.spec.cluster import ClusterSpec
    from simulator.spec.model import ModelSpec

Primitive = Literal["replicate", "split"]
_Share = Annotated[int, Field(ge=0, le=LIMITS.global_batch)]


class VirtualDevice(BaseModel):
    """The physical GPUs ('node:gpu') a TaskGraph (one nested replica of it) runs on.

    ``types`` optionally records each GPU's device type name (``ClusterSpec.device_types``); when
    given it must agree with the cluster (``hybrid_issues``). ``on(cluster, devices)`` fills it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    devices: tuple[Name, ...] = Field(
        min_length=1, max_length=LIMITS.gpus, fail_fast=True, description="GPUs as 'node:gpu_index'."
    )
    types: tuple[Name, ...] = Field(
        (), max_length=LIMITS.gpus, description="Device type of each GPU; empty: not recorded."
    )

    @model_validator(mode="after")
    def _check(self) -> VirtualDevice:
        seen: set[str] = set()
        issues = []
        for i, d in enumerate(self.devices):
            if d in seen:
                issues.append(Issue(("devices", i), f"{d} appears twice"))
            seen.add(d)
        if self.types and len(self.types) != len(self.devices):
            issues.append(Issue(("types",), f"has {len(self.types)} entries for {len(self.devices)} devices"))
        structural(issues)
        return self

    @classmethod
    def on(cls, cluster: ClusterSpec, devices: Sequence[str]) -> VirtualDevice:
        """The VirtualDevice of ``devices`` with their types read from ``cluster``."""
        return cls(
            devices=tuple(devices),
            types=tuple(cluster.device_type(d.rpartition(":")[0]).name for d in devices),
        )

    def ranks(self, cluster: ClusterSpec) -> tuple[int, ...]:
        """Each GPU's global rank: its position in ``cluster.devices`` (node by node)."""
        return tuple(device_rank(cluster, d) for d in self.devices)


class TaskGraph(BaseModel):
    """Layers [first_layer, last_layer) under one primitive, on one VirtualDevice per nested replica.

    ``replicate``: every device of a VirtualDevice holds the whole TaskGraph and runs its
    ``batch_shares`` samples (None: the replica's batch split evenly, the first devices one larger).
    ``split``: the TaskGraph's tensors are sharded over the devices, each running the whole batch;
    ``split_shares`` weight the cut of the split dimension (None: even).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Label = Field("", description="Optional label, e.g. 'features'.")
    first_layer: int = Field(ge=0, lt=LIMITS.layers, description="First layer (inclusive).")
    last_layer: int = Field(ge=1, le=LIMITS.layers, description="One past the last layer (exclusive).")
    primitive: Primitive = Field("replicate", description="Whale's primitive: replicate (DP) or split (TP).")
    degree: int = Field(
        1, ge=1, le=LIMITS.gpus, description="Devices per VirtualDevice (replicate(n)/split(n))."
    )
    virtual_devices: tuple[VirtualDevice, ...] = Field(
        min_length=1, max_length=LIMITS.gpus, fail_fast=True, description="One per nested DP replica."
    )
    batch_shares: dict[Name, _Share] | None = Field(
        None, max_length=LIMITS.gpus, description="replicate: samples per step for each device; None: even."
    )
    split_shares: tuple[Annotated[int, Field(ge=1, le=LIMITS.global_batch)], ...] | None = Field(
        None, max_length=LIMITS.gpus, description="split: relative weight of each device's shard; None: even."
    )

    @model_validator(mode="after")
    def _check(self) -> TaskGraph:
        issues = []
        if self.last_layer <= self.first_layer:
            issues.append(Issue(("last_layer",), f"must be > first_layer ({self.first_layer})"))
        seen: dict[str, int] = {}
        for r, vd in enumerate(self.virtual_devices):
            if len(vd.devices) != self.degree:
                issues.append(
                    Issue(
                        ("virtual_devices", r, "devices"),
                        f"has {len(vd.devices)} devices, degree is {self.degree}",
                    )
                )
            for j, d in enumerate(vd.devices):
                if d in seen:
                    issues.append(
                        Issue(
                            ("virtual_devices", r, "devices", j),
                            f"{d} is already in nested replica {seen[d]}",
                        )
                    )
                seen.setdefault(d, r)
        if self.batch_shares is not None:
            if self.primitive != "replicate":
                issues.append(Issue(("batch_shares",), "only a replicate TaskGraph has batch shares"))
            for d in self.batch_shares:
                if d not in seen:
                    issues.append(Issue(("batch_shares", d), "is not a device of this TaskGraph"))
            for d in seen:
                if d not in self.batch_shares:
                    issues.append(Issue(("batch_shares",), f"no share for device {d}"))
        if self.split_shares is not None:
            if self.primitive != "split":
                issues.append(Issue(("split_shares",), "only a split TaskGraph has split shares"))
            elif len(self.split_shares) != self.degree:
                issues.append(
                    Issue(("split_shares",), f"has {len(self.split_shares)} weights, degree is {self.degree}")
                )
        structural(issues)
        return self

    @property
    def devices(self) -> tuple[str, ...]:
        """Every device of the TaskGraph, nested replica by replica."""
        return tuple(d for vd in self.virtual_devices for d in vd.devices)

    def shares(self, replica: int, replica_batch: int) -> tuple[int, ...]:
        """Samples per step of each device of nested replica ``replica`` (split: the whole batch)."""
        vd = self.virtual_devices[replica]
        if self.primitive == "split":
            return (replica_batch,) * self.degree
        if self.batch_shares is not None:
            return tuple(self.batch_shares[d] for d in vd.devices)
        return even_shares(replica_batch, self.degree)

    def split_sizes(self, dim: int) -> tuple[int, ...]:
        """How a split dimension of size ``dim`` is cut over the devices (largest remainder)."""
        return proportional_sizes(dim, self.split_shares or (1,) * self.degree)


class HybridPlan(BaseModel):
    """A Whale plan: TaskGraphs covering the model in order, nested DP and micro-batching.

    ``num_micro_batches``, ``schedule`` and ``k`` are ``Plan``'s (micro-batches of one step over
    all nested replicas, ``global_batch = micro_batch_size x num_micro_batches``); with
    ``num_micro_batches > 1`` the TaskGraphs form a pipeline and ``to_plan()`` is its ``Plan``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["hybrid"] = "hybrid"
    name: Label = Field("", description="Optional label, e.g. 'hardware-aware'.")
    model: SpecName | None = Field(None, description="Zoo name of the model this plan is for.")
    cluster: SpecName | None = Field(None, description="Zoo name of the cluster this plan is for.")
    task_graphs: tuple[TaskGraph, ...] = Field(min_length=1, max_length=LIMITS.layers, fail_fast=True)
    nested_dp: int = Field(1, ge=1, le=LIMITS.gpus, description="Data-parallel copies of the whole plan.")
    global_batch: int = Field(ge=1, le=LIMITS.global_batch, description="Samples per step over the cluster.")
    replica_batches: tuple[_Share, ...] | None = Field(
        None, max_length=LIMITS.gpus, description="Samples per step of each nested replica; None: even."
    )
    num_micro_batches: int = Field(1, ge=1, le=LIMITS.micro_batches, description="As Plan.num_micro_batches.")
    schedule: Literal["gpipe", "1f1b", "kfkb"] = Field("1f1b", description="As Plan.schedule.")
    k: int = Field(1, ge=1, le=LIMITS.micro_batches, description="As Plan.k (kFkB group size).")

    @model_validator(mode="after")
    def _check(self) -> HybridPlan:
        issues: list[Issue] = []
        prev = 0
        for i, tg in enumerate(self.task_graphs):
            if tg.first_layer != prev:
                issues.append(
                    Issue(("task_graphs", i, "first_layer"), f"is {tg.first_layer}, expected {prev}")
                )
            prev = tg.last_layer
            if len(tg.virtual_devices) != self.nested_dp:
                issues.append(
                    Issue(
                        ("task_graphs", i, "virtual_devices"),
                        f"has {len(tg.virtual_devices)} VirtualDevices, nested_dp is {self.nested_dp}",
                    )
                )
        if self.replica_batches is None:
            if self.global_batch % self.nested_dp:
                issues.append(
                    Issue(
                        ("global_batch",),
                        f"{self.global_batch} does not split evenly over nested_dp {self.nested_dp}",
                    )
                )
        else:
            if len(self.replica_batches) != self.nested_dp:
                issues.append(
                    Issue(
                        ("replica_batches",),
                        f"has {len(self.replica_batches)} entries, nested_dp is {self.nested_dp}",
                    )
                )
            elif sum(self.replica_batches) != self.global_batch:
                issues.append(
                    Issue(
                        ("replica_batches",),
                        f"sum to {sum(self.replica_batches)} but global_batch is {self.global_batch}",
                    )
                )
        structural(issues)
        owner: dict[str, int] = {}
        for i, tg in enumerate(self.task_graphs):
            for r, vd in enumerate(tg.virtual_devices):
                for j, d in enumerate(vd.devices):
                    if owner.setdefault(d, r) != r:
                        issues.append(
                            Issue(
                                ("task_graphs", i, "virtual_devices", r, "devices", j),
                                f"{d} is already in nested replica {owner[d]}",
                            )
                        )
            if tg.batch_shares is not None:
                for r in range(self.nested_dp):
                    got = sum(tg.shares(r, 0))
                    if got != self.replica_batch(r):
                        issues.append(
                            Issue(
                                ("task_graphs", i, "batch_shares"),
                                f"nested replica {r}'s shares sum to {got}, its batch is {self.replica_batch(r)}",
                            )
                        )
        if self.num_micro_batches > 1:
            taken: dict[str, int] = {}
            for i, tg in enumerate(self.task_graphs):
                for d in tg.devices:
                    if taken.setdefault(d, i) != i:
                        issues.append(
                            Issue(
                                ("task_graphs", i, "virtual_devices"),
                                f"{d} is also in task graph {taken[d]}: pipelined TaskGraphs need their own devices",
                            )
                        )
                        break
        structural(issues)
        if self.num_micro_batches > 1 or self.k != 1 or self.schedule != "1f1b":
            self._pipeline_issues()
        return self

    def _pipeline_issues(self) -> None:
        try:
            self.to_plan()
        except SpecError as e:
            structural(e.issues)

    def replica_batch(self, replica: int) -> int:
        """Samples per step of nested replica ``replica``."""
        if self.replica_batches is not None:
            return self.replica_batches[replica]
        return self.global_batch // self.nested_dp

    @property
    def micro_batch_size(self) -> int:
        return self.global_batch // self.num_micro_batches

    @property
    def devices(self) -> tuple[str, ...]:
        """Every GPU the plan uses, each once, in order of first use."""
        return tuple(dict.fromkeys(d for tg in self.task_graphs for d in tg.devices))

    def device_shares(self, task_graph: int) -> dict[str, int]:
        """Samples per step of each device of TaskGraph ``task_graph`` (split: the whole replica batch)."""
        tg = self.task_graphs[task_graph]
        out: dict[str, int] = {}
        for r, vd in enumerate(tg.virtual_devices):
            out.update(zip(vd.devices, tg.shares(r, self.replica_batch(r)), strict=True))
        return out

    def to_plan(self) -> Plan:
        """The pipeline issue's ``Plan`` of this hybrid plan: one Stage per TaskGraph.

        Stage i holds TaskGraph i's devices replica by replica, ``replicate = nested_dp x degree``
        for a replicate TaskGraph (``nested_dp`` and ``split = degree`` for a split one), and
        ``batch_shares`` are the first TaskGraph's shares (a split first TaskGraph: the replica's
        batch on its VirtualDevice's first GPU). Raises ``SpecError`` (paths on the hybrid plan's
        fields) when the micro-batching does not fit, e.g. a share that is no multiple of the
        micro-batch size.
        """
        stages = []
        for tg in self.task_graphs:
            rep = self.nested_dp * (tg.degree if tg.primitive == "replicate" else 1)
            split = tg.degree if tg.primitive == "split" else 1
            stages.append(
                Stage(
                    first_layer=tg.first_layer,
                    last_layer=tg.last_layer,
                    devices=tg.devices,
                    replicate=rep,
                    split=split,
                )
            )
        first = self.task_graphs[0]
        if first.primitive == "replicate":
            shares = self.device_shares(0)
        else:
            shares = {vd.devices[0]: self.replica_batch(r) for r, vd in enumerate(first.virtual_devices)}
        if self.global_batch % self.num_micro_batches:
            raise SpecError(
                [Issue(("num_micro_batches",), f"does not divide global_batch {self.global_batch}")]
            )
        data = {
            "stages": stages,
            "global_batch": self.global_batch,
            "batch_shares": shares,
            "micro_batch_size": self.micro_batch_size,
            "num_micro_batches": self.num_micro_batches,
            "schedule": self.schedule,
            "k": self.k,
        }
        try:
            return Plan.model_validate(data)
        except ValidationError as e:
            err = SpecError.from_pydantic(e)
            raise SpecError([_plan_path(i) for i in err.issues]) from None

    def check(self, model: ModelSpec, cluster: ClusterSpec) -> None:
        """Raise SpecError naming every field that does not fit ``model`` on ``cluster``."""
        issues = hybrid_issues(self, model, cluster)
        if issues:
            raise SpecError(issues)


def _plan_path(issue: Issue) -> Issue:
    """A Plan issue at the HybridPlan field it comes from (stages.i -> task_graphs.i)."""
    p = issue.path
    if p and p[0] == "stages":
        return Issue(("task_graphs", *p[1:]), issue.reason)
    if p and p[0] == "batch_shares":
        return Issue(("task_graphs", 0, *p), f"{issue.reason} (pipeline micro-batching)")
    return issue


def hybrid_issues(plan: HybridPlan, model: ModelSpec, cluster: ClusterSpec) -> list[Issue]:
    """Every reason ``plan`` does not fit ``model`` on ``cluster`` (layers, device names and types)."""
    issues: list[Issue] = []
    if plan.model is not None and plan.model != model.name:
        issues.append(Issue(("model",), f"plan is for model {plan.model!r}, not {model.name!r}"))
    if plan.cluster is not None and plan.cluster != cluster.name:
        issues.append(Issue(("cluster",), f"plan is for cluster {plan.cluster!r}, not {cluster.name!r}"))
    last = plan.task_graphs[-1]
    if last.last_layer != len(model.layers):
        issues.append(
            Issue(
                ("task_graphs", len(plan.task_graphs) - 1, "last_layer"),
                f"is {last.last_layer}, the model has {len(model.layers)} layers",
            )
        )
    for i, tg in enumerate(plan.task_graphs):
        for r, vd in enumerate(tg.virtual_devices):
            for j, d in enumerate(vd.devices):
                path = ("task_graphs", i, "virtual_devices", r)
                reason = device_issue(d, cluster)
                if reason:
                    issues.append(Issue((*path, "devices", j), reason))
                elif vd.types:
                    actual = cluster.device_type(d.rpartition(":")[0]).name
                    if vd.types[j] != actual:
                        issues.append(
                            Issue((*path, "types", j), f"is {vd.types[j]!r}, but {d} is a {actual}")
                        )
    if plan.num_micro_batches > 1 and not issues:
        issues.extend(_plan_path(i) for i in plan_issues(plan.to_plan(), model, cluster))
    return issues


def device_rank(cluster: ClusterSpec, device: str) -> int:
    """Global rank of 'node:gpu' in ``cluster.devices`` order."""
    node, _, idx = device.rpartition(":")
    n = cluster.node_index[node]
    return sum(cluster.nodes[i].gpus for i in range(n)) + int(idx)


def device_name(cluster: ClusterSpec, rank: int) -> str:
    """'node:gpu' of global rank ``rank`` (the inverse of ``device_rank``)."""
    dev = cluster.devices[rank]
    return f"{cluster.nodes[dev.node].name}:{dev.local}"


def even_shares(total: int, parts: int) -> tuple[int, ...]:
    """``total`` split into ``parts`` near-equal integers, the first ones one larger."""
    q, r = divmod(total, parts)
    return tuple(q + (1 if i < r else 0) for i in range(parts))


def proportional_sizes(total: int, weights: Sequence[float]) -> tuple[int, ...]:
    """``total`` cut in proportion to ``weights`` (largest remainder, ties to the first)."""
    w = sum(weights)
    exact = [total * x / w for x in weights]
    sizes = [int(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in order[: total - sum(sizes)]:
        sizes[i] += 1
    return tuple(sizes)


# --- annotations: Whale's user API -------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """One primitive with its device count; ``degree`` None: one replica per device of the cluster."""

    primitive: Primitive
    degree: int | None = None


_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("strategist_hybrid_scope", default=None)


@contextlib.contextmanager
def _scoped(scope: Scope) -> Iterator[Scope]:
    if scope.degree is not None and not 1 <= scope.degree <= LIMITS.gpus:
        raise ValueError(f"{scope.primitive}: device_count must be in [1, {LIMITS.gpus}], got {scope.degree}")
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def replicate(device_count: int | None = None) -> contextlib.AbstractContextManager[Scope]:
    """``with replicate(n):`` the layers run inside form a data-parallel TaskGraph on n devices."""
    return _scoped(Scope("replicate", device_count))


def split(device_count: int) -> contextlib.AbstractContextManager[Scope]:
    """``with split(n):`` the layers run inside form a TaskGraph sharded over n devices."""
    return _scoped(Scope("split", device_count))


def current_scope() -> Scope | None:
    """The innermost ``replicate``/``split`` scope active here, or None."""
    return _SCOPE.get()


class ModuleAnnotation(BaseModel):
    """One entry of a per-module mapping: the layers named ``module`` (or below it) get a primitive."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    module: Name = Field(description="Module path, e.g. 'classifier'; matches it and 'classifier.*'.")
    primitive: Primitive
    degree: int | None = Field(None, ge=1, le=LIMITS.gpus, description="Devices; None: every device.")
    group: int | None = Field(
        None,
        ge=0,
        le=LIMITS.layers,
        description="Entries with one group form one TaskGraph (one 'with' block); None: its own.",
    )


class Annotation(BaseModel):
    """A per-module mapping to primitives (Whale's annotations as data, e.g. from the API).

    A layer takes the entry with the longest matching module path; unmatched layers take
    ``default`` (Whale's ``set_default_strategy``; ``replicate`` over every device by default).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    modules: tuple[ModuleAnnotation, ...] = Field((), max_length=LIMITS.layers, fail_fast=True)
    default: Primitive = "replicate"
    default_degree: int | None = Field(None, ge=1, le=LIMITS.gpus, description="None: every device.")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Scope], default: Scope = Scope("replicate")) -> Annotation:
        """From ``{"features": Scope("replicate", 2), "classifier": Scope("split", 4)}``."""
        return cls(
            modules=tuple(
                ModuleAnnotation(module=m, primitive=s.primitive, degree=s.degree) for m, s in mapping.items()
            ),
            default=default.primitive,
            default_degree=default.degree,
        )

    def scope_of(self, layer: str) -> tuple[tuple[str, int], Scope]:
        """The TaskGraph key (entry group, or the default) and the scope of layer ``layer``."""
        best: tuple[int, ModuleAnnotation] | None = None
        for i, a in enumerate(self.modules):
            if _under(layer, a.module) and (best is None or len(a.module) > len(best[1].module)):
                best = (i, a)
        if best is None:
            return ("default", 0), Scope(self.default, self.default_degree)
        i, a = best
        key = ("group", a.group) if a.group is not None else ("entry", i)
        return key, Scope(a.primitive, a.degree)


def _under(layer: str, module: str) -> bool:
    # Layer names are module paths; the extractor adds '#2' for a module's second call.
    return layer == module or layer.startswith((module + ".", module + "#"))


def trace_scopes(module: Any, *inputs: Any) -> Annotation:
    """Run ``module(*inputs)`` once and record the scope every leaf submodule ran under.

    ``module`` is a ``torch.nn.Module`` whose ``forward`` uses ``with replicate(n):`` /
    ``with split(n):``; leaf modules run outside any scope take the Annotation's default. The
    forward runs under ``torch.no_grad`` and the hooks are removed afterwards.
    """
    import torch

    seen: dict[str, Scope] = {}
    blocks: dict[int, int] = {}  # id of a 'with' block's Scope -> its group number
    handles = []
    for name, sub in module.named_modules():
        if name and not any(True for _ in sub.children()):

            def hook(_m: Any, _args: Any, name: str = name) -> None:
                scope = current_scope()
                if scope is not None and name not in seen:
                    seen[name] = scope
                    blocks.setdefault(id(scope), len(blocks))

            handles.append(sub.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in handles:
            h.remove()
    return Annotation(
        modules=tuple(
            ModuleAnnotation(module=m, primitive=s.primitive, degree=s.degree, group=blocks[id(s)])
            for m, s in seen.items()
        )
    )


def plan_from_annotations(
    model: ModelSpec,
    cluster: ClusterSpec,
    annotation: Annotation,
    global_batch: int,
    *,
    num_micro_batches: int = 1,
    schedule: Literal["gpipe", "1f1b", "kfkb"] = "1f1b",
    k: int = 1,
    name: str = "",
) -> HybridPlan:
    """TaskGraphs from ``annotation`` (consecutive layers with one scope), placed as Whale does.

    Placement (§3.2.1): VirtualDevices take the cluster's devices in rank order. When the
    TaskGraphs' device counts d_i sum to at most the K devices of the cluster they get disjoint
    devices and, when K is a multiple of the sum, nested DP of degree K / sum(d_i) replicates the
    plan on the next devices. When the sum exceeds K (Whale's Example 2: replicate(K) then
    split(K)) the TaskGraphs share devices: each takes the first d_i devices of its nested
    replica, whose size is the largest d_i. Shares are even (balancing is ``search.hybrid``'s).
    """
    total = len(cluster.devices)
    groups: list[tuple[int, int, Scope]] = []
    last_key: tuple[str, int] | None = None
    for i, layer in enumerate(model.layers):
        key, s = annotation.scope_of(layer.name)
        if groups and key == last_key:
            groups[-1] = (groups[-1][0], i + 1, s)
        else:
            groups.append((i, i + 1, s))
        last_key = key
    degrees = [s.degree or total for _, _, s in groups]
    issues = [
        Issue(("modules",), f"layers {a}..{b - 1} ask for {d} devices, the cluster has {total}")
        for (a, b, _), d in zip(groups, degrees, strict=True)
        if d > total
    ]
    if issues:
        raise SpecError(issues)
    shared = sum(degrees) > total
    per_replica = max(degrees) if shared else sum(degrees)
    nested = total // per_replica if total % per_replica == 0 else 1
    names = [device_name(cluster, r) for r in range(total)]
    tgs = []
    offset = 0
    for (a, b, s), d in zip(groups, degrees, strict=True):
        start = 0 if shared else offset
        vds = tuple(
            VirtualDevice.on(cluster, names[r * per_replica + start : r * per_replica + start + d])
            for r in range(nested)
        )
        tgs.append(
            TaskGraph(first_layer=a, last_layer=b, primitive=s.primitive, degree=d, virtual_devices=vds)
        )
        offset += d
    try:
        return HybridPlan(
            name=name,
            model=model.name,
            cluster=cluster.name,
            task_graphs=tuple(tgs),
            nested_dp=nested,
            global_batch=global_batch,
            num_micro_batches=num_micro_batches,
            schedule=schedule,
            k=k,
        )
    except ValidationError as e:
        raise SpecError.from_pydantic(e) from None


def plan_document(document: dict[str, Any]) -> tuple[HybridPlan, tuple[Profile, ...] | None]:
    """A hybrid trial document as (plan, the profiles it was ranked with, None when it carries
    none): the plan's own fields validated as ``HybridPlan``, the carried ``profiles`` as
    ``Profile``s (issue 15: a hybrid search's trial carries the profiles it was ranked with, so
    the worker's replay computes with them). Raises SpecError with field paths on a bad document.
    """
    fields = {k: v for k, v in document.items() if k != "profiles"}
    raw = document.get("profiles")
    profiles: list[Profile] = []
    for i, p in enumerate(raw or ()):
        try:
            profiles.append(Profile.model_validate(p))
        except ValidationError as e:
            issues = SpecError.from_pydantic(e).issues
            raise SpecError([Issue(("profiles", i, *x.path), x.reason) for x in issues]) from None
    try:
        plan = HybridPlan.model_validate(fields)
    except ValidationError as e:
        raise SpecError.from_pydantic(e) from None
    return plan, None if raw is None else tuple(profiles)
