"""Hybrid searches (issue 19, Whale): TaskGraph plans with hardware-aware shares on mixed GPUs.

Options (``plan_options`` of a search with ``plan_kind='hybrid'``), every one optional:

- ``annotations``: Whale's annotations as a per-module mapping, ``{"<module>": {"primitive":
  "replicate"|"split", "degree": n|null, "group": g|null}}`` (``simulator.spec.ModuleAnnotation``;
  a module matches the layers named ``<module>`` or below it, ``degree`` null = every device);
  layers no entry matches take ``default``. Without annotations the partition is automatic;
- ``default``: ``{"primitive": ..., "degree": ...}`` for unannotated layers (replicate over every
  device unless given);
- ``global_batch``: samples per step over the cluster, default the model's ``batch_size`` x devices
  (the per-GPU batch of a sync search);
- ``num_micro_batches``: micro-batches between annotated TaskGraphs (default 1: no pipeline);
- ``max_task_graphs``: the automatic partition tries 1..this many TaskGraphs (default 4).

Candidates of a round, ranked by the hybrid cost model (``simulator.hybrid.predict``):
annotated: the plan Whale places from the annotations (``plan_from_annotations``: devices in
rank order, even shares) and the same plan with Algorithm 1's hardware-aware shares on each
replicate TaskGraph (``search.hybrid.memory_constrained_balance``; not for pipelined plans);
automatic: every fitting candidate of ``search.hybrid.auto_partition`` (data parallelism with
Algorithm 1's shares, memory-placed speed-balanced pipelines). A plan the memory model says does
not fit is still proposed when nothing else is left (its trial then shows the device's
out-of-memory), ranked after every plan that fits. Baseline ``even``: data parallelism with the
batch split evenly, the homogeneous default Whale compares against.

With ``"space": "3d"`` the search ranks TP x PP x DP plans with ZeRO and recompute instead
(``service.plans.hybrid_threed``: its own options, no baseline, predicted only: no trial is queued).

Similarity between two candidates: the fraction of (TaskGraph count, nested DP, pipelined) they
share (a decision; the cost model ranks, nothing samples).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from pydantic import ValidationError

from search.feasibility import MemoryConfig, MemoryModel
from service.domain import Search, Trial
from service.plans.base import (
    Loc,
    OptionsInvalid,
    PlanKind,
    RoundAsk,
    RoundPlan,
    document_key,
    known_options,
    ranked_round,
)
from service.plans.hybrid_threed import ThreeDSpace, is_3d
from simulator.spec import ClusterSpec, HybridPlan, ModelSpec, SpecError
from simulator.spec.hybrid import Annotation, ModuleAnnotation, hybrid_issues, plan_from_annotations
from simulator.spec.limits import LIMITS
from simulator.spec.profile import Profile

DEFAULTS: dict[str, Any] = {
    "annotations": None,
    "default": None,
    "global_batch": None,
    "num_micro_batches": 1,
    "max_task_graphs": 4,
}


def _issues(path: Loc, error: ValidationError | SpecError) -> list[tuple[Loc, str]]:
    err = error if isinstance(error, SpecError) else SpecError.from_pydantic(error)
    return [(("plan_options", *path, *i.path), i.reason) for i in err.issues]


def _annotatable(model: ModelSpec) -> set[str]:
    """Every module name an annotation may target: each layer's name and each of its prefixes that
    ends before a "." or "#" (one pass over the layers, so checking A annotations costs O(A + L),
    not O(A x L): issue 44 measured 33 s for 1,000 annotations on a 100k-layer model)."""
    names: set[str] = set()
    for layer in model.layers:
        name = layer.name
        names.add(name)
        names.update(name[:i] for i, c in enumerate(name) if c in ".#")
    return names


def _int_in(out: dict[str, Any], field: str, lo: int, hi: int) -> list[tuple[Loc, str]]:
    v = out[field]
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        return [(("plan_options", field), f"must be an int in [{lo}, {hi}], got {v!r}")]
    return []


class HybridPlans(PlanKind):
    """Whale hybrid plans (see the module docstring)."""

    name: ClassVar[str] = "hybrid"
    BASELINES: ClassVar[tuple[str, ...]] = ("even",)

    def validate(
        self, options: dict[str, Any] | None, *, objective: str, model: ModelSpec, cluster: ClusterSpec
    ) -> dict[str, Any]:
        if is_3d(options):  # TP x PP x DP plans (issue 42)
            return ThreeDSpace().validate(options, model=model, cluster=cluster)
        out = known_options(options, DEFAULTS, "hybrid")
        n = len(cluster.devices)
        if out["global_batch"] is None:
            out["global_batch"] = min(model.batch_size * n, LIMITS.global_batch)
        issues = _int_in(out, "global_batch", 1, LIMITS.global_batch)
        issues += _int_in(out, "num_micro_batches", 1, LIMITS.micro_batches)
        issues += _int_in(out, "max_task_graphs", 1, LIMITS.layers)
        ann = out["annotations"]
        if ann is not None and not isinstance(ann, dict):
            issues.append((("plan_options", "annotations"), "must be a mapping of module name to primitive"))
        elif ann is not None:
            targets = _annotatable(model)
            for module, entry in ann.items():
                if module not in targets:
                    issues.append(
                        (
                            ("plan_options", "annotations", module),
                            f"no layer of {model.name} is named {module!r} or below it",
                        )
                    )
                    continue
                if not isinstance(entry, dict):
                    issues.append(
                        (("plan_options", "annotations", module), "must be an object with 'primitive'")
                    )
                    continue
                try:
                    ModuleAnnotation.model_validate({**entry, "module": module})
                except (ValidationError, SpecError) as e:
                    issues += _issues(("annotations", module), e)
                    continue
                if entry.get("degree") is not None and entry["degree"] > n:
                    issues.append(
                        (
                            ("plan_options", "annotations", module, "degree"),
                            f"{entry['degree']} devices asked, {cluster.name} has {n}",
                        )
                    )
        if out["default"] is not None:
            if not isinstance(out["default"], dict):
                issues.append((("plan_options", "default"), "must be an object with 'primitive'"))
            else:
                try:
                    ModuleAnnotation.model_validate({**out["default"], "module": "default"})
                except (ValidationError, SpecError) as e:
                    issues += _issues(("default",), e)
        if issues:
            raise OptionsInvalid(issues)
        if ann is not None:
            try:
                plan = annotated_plan(model, cluster, out)
                problems = hybrid_issues(plan, model, cluster)
                if problems:
                    raise SpecError(problems)
            except (SpecError, ValueError) as e:
                err = e if isinstance(e, SpecError) else None
                if err is None:
                    raise OptionsInvalid([(("plan_options", "annotations"), str(e))]) from None
                raise OptionsInvalid(
                    [
                        (("plan_options", "annotations"), f"{'.'.join(map(str, i.path))}: {i.reason}")
                        for i in err.issues
                    ]
                ) from None
        return out

    def predicted_only(self, options: dict[str, Any] | None) -> bool:
        return is_3d(options)  # no worker runs a TP x PP x DP plan (service.plans.hybrid_threed)

    def due_baselines(self, search: Search, trials: Sequence[Trial]) -> tuple[str, ...]:
        return () if is_3d(search.plan_options) else self.BASELINES  # a 3D search measures nothing

    def baselines(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        options: dict[str, Any],
        names: tuple[str, ...],
        profiles: tuple[Profile, ...] | None = None,
    ) -> dict[str, dict[str, Any]]:
        from search.hybrid import even_data_parallel

        if is_3d(options):
            return {}  # predicted only: no baseline is measured
        if "even" not in names:
            return {}
        plan = even_data_parallel(model, cluster, int(options["global_batch"]))
        return {"even": carrying(plan.model_dump(mode="json"), profiles)}

    def plan_round(
        self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any], ask: RoundAsk
    ) -> RoundPlan:
        if is_3d(options):
            return ThreeDSpace().plan_round(model, cluster, options, ask)
        out = ranked_round(
            scored_plans(model, cluster, options, ask.profiles),
            ask,
            lambda p: (len(p.task_graphs), p.nested_dp, p.num_micro_batches > 1),
            "hybrid-cost-model",
        )
        drafts = tuple(replace(d, strategy=carrying(d.strategy, ask.profiles)) for d in out.drafts)
        return replace(out, drafts=drafts)


def carrying(document: dict[str, Any], profiles: tuple[Profile, ...] | None) -> dict[str, Any]:
    """``document`` carrying the profiles its plan was ranked with (unchanged when None), so the
    worker replays with them (``runtime.worker.plan_hybrid``; ``plan_document`` reads them back)."""
    if profiles is None:
        return document
    return {**document, "profiles": [p.model_dump(mode="json") for p in profiles]}


def annotation(options: dict[str, Any]) -> Annotation:
    """The options' per-module mapping as ``simulator.spec.Annotation``."""
    default = options.get("default") or {}
    modules = tuple(
        ModuleAnnotation.model_validate({**entry, "module": module})
        for module, entry in (options.get("annotations") or {}).items()
    )
    return Annotation(
        modules=modules,
        default=default.get("primitive", "replicate"),
        default_degree=default.get("degree"),
    )


def annotated_plan(model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]) -> HybridPlan:
    """The plan Whale places from the annotations (even shares)."""
    return plan_from_annotations(
        model,
        cluster,
        annotation(options),
        int(options["global_batch"]),
        num_micro_batches=int(options["num_micro_batches"]),
        name="annotated (even shares)",
    )


def balanced_shares(
    model: ModelSpec, cluster: ClusterSpec, plan: HybridPlan, memory: MemoryModel
) -> HybridPlan | None:
    """``plan`` with Algorithm 1's shares on every replicate TaskGraph of degree > 1 (None: no
    TaskGraph to balance, a pipelined plan, or Algorithm 1 finds no feasible shares)."""
    from search.hybrid import InfeasibleBalance, device_slots, memory_constrained_balance, replicate_profile

    if plan.num_micro_batches > 1:
        return None
    tgs = []
    changed = False
    for tg in plan.task_graphs:
        if tg.primitive != "replicate" or tg.degree < 2:
            tgs.append(tg)
            continue
        shares: dict[str, int] = {}
        for r, vd in enumerate(tg.virtual_devices):
            batch = plan.replica_batch(r)
            slots = device_slots(
                model, cluster, vd.devices, memory, first=tg.first_layer, last=tg.last_layer,
                batch=max(1, batch // tg.degree),
            )  # fmt: skip
            try:
                bal = memory_constrained_balance(
                    replicate_profile(memory, tg.first_layer, tg.last_layer, batch), slots
                )
            except InfeasibleBalance:
                return None
            shares.update(zip(vd.devices, bal.shares, strict=True))
        tgs.append(tg.model_copy(update={"batch_shares": shares}))
        changed = True
    if not changed:
        return None
    data = plan.model_dump()
    data.update(task_graphs=[t.model_dump() for t in tgs], name="annotated (Algorithm 1 shares)")
    out = HybridPlan.model_validate(data)
    same = all(out.device_shares(t) == plan.device_shares(t) for t in range(len(tgs)))
    return None if same else out


def scored_plans(
    model: ModelSpec,
    cluster: ClusterSpec,
    options: dict[str, Any],
    profiles: tuple[Profile, ...] | None = None,
) -> list[tuple[float, HybridPlan]]:
    """Every candidate plan with its predicted seconds: plans that fit first, each group fastest
    first; ``profiles``: the measured profiles of the model to rank with (None: the profile
    store's)."""
    from search.hybrid import auto_partition, memory_reasons
    from simulator.hybrid import predict
    from simulator.profile.store import store_cost_params

    # the replay's CostParams (runtime.hybrid.replay_cost_params with the default config) with the
    # given profiles (the service's stored ones in use), else the profile store's (issue 15)
    params = store_cost_params(model.name, profiles=profiles)
    memory = MemoryModel(model, cluster, MemoryConfig())
    if options.get("annotations") is not None:
        even = annotated_plan(model, cluster, options)
        plans = [p for p in (balanced_shares(model, cluster, even, memory), even) if p is not None]
    else:
        try:
            auto = auto_partition(
                model,
                cluster,
                memory,
                int(options["global_batch"]),
                max_stages=int(options["max_task_graphs"]),
            )
        except ValueError:
            return []
        plans = [c.plan for c in auto.candidates if c.plan is not None and not c.reason]
    scored = []
    seen = set()
    for p in plans:
        key = document_key(p.model_dump(mode="json"))
        if key in seen:
            continue
        seen.add(key)
        scored.append((bool(memory_reasons(p, memory)), predict(model, cluster, p, params).seconds, p))
    scored.sort(key=lambda x: (x[0], x[1]))
    return [(s, p) for _, s, p in scored]
