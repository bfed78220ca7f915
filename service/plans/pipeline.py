"""Pipeline searches (issue 17, Ada-Grouper): stage partitions and (k, b) on the memory-limit curve.

Options (``plan_options`` of a search with ``plan_kind='pipeline'``), every one optional:

- ``stages``: the number of pipeline stages, an int in [2, min(devices, layers)], or ``"choose"``
  (the default): every stage count in that range whose partition fits is a candidate;
- ``memory_per_device_gb``: usable memory of one device (positive, finite, at most the smallest
  device's memory); default: 90 % of each device's memory (``search.feasibility.MemoryConfig``);
- ``global_batch``: samples per step over the cluster, default the model's ``batch_size``
  (split evenly over the nested pipeline replicas: devices // stages of them);
- ``adaptive``: trials run the online tuner over their partition's memory curve (default true);
- ``tuner_interval``: steps between the tuner's re-evaluations (default 2: trials are short).

A round: for each stage count P, the stages are cut as Whale's inter-TaskGraph placement cuts a
pipeline (``search.hybrid.balanced_pipeline``: devices ordered by memory, layers balanced by
speed, checked against the memory model), nested D = devices // P times; the (k, b) candidates
of that partition are ``search.pipeline.memory_curve``'s under the memory above. Each point of
each curve is a candidate document (``runtime.worker.plan_pipeline.PipelineTrial``: the whole
curve, starting on that point), predicted by the hybrid cost model (``simulator.hybrid.predict``:
the pipeline issue's event simulation of the kFkB action lists, compute model per device, bytes
over the links, DP all-reduce across replicas) with the CostParams the trial's replay computes
with (``store_cost_params``: the measured profiles of the model the loop hands the round, the service's
stored ones in use, else the profile store's, issue 15), and each document carries those profiles
so the worker's replay computes with them too; the K fastest predicted that were not tried yet
are the round's candidates. Baseline ``1f1b``: the fixed 1F1B plan with the largest micro-batch
that fits, on the partition of the best predicted candidate (what Ada-Grouper compares against).

Similarity between two candidates (shown with them, as Eq. 11's term is for sync strategies): the
fraction of (stage count, k, b) they share — a decision; the cost model ranks, nothing samples.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from search.feasibility import MemoryConfig, MemoryModel
from search.pipeline import memory_curve, plan_memory
from search.pipeline.candidates import with_kb
from service.plans.base import OptionsInvalid, PlanKind, RoundAsk, RoundPlan, known_options, ranked_round
from simulator.profile.store import store_cost_params
from simulator.spec import ClusterSpec, ModelSpec, Plan
from simulator.spec.limits import LIMITS
from simulator.spec.profile import Profile

#: What (k, b) means wherever a pipeline plan is shown (candidate and trial pages, the CLI).
#: Ada-Grouper (Wang et al.) §2.5 and §4.2: a kFkB schedule groups k micro-batches and runs their
#: k forward stages, then their k backward stages, as one schedule unit; b is the micro-batch size.
#: In this code (``simulator.spec.Plan.group_size``, ``search.pipeline.candidates.with_kb``):
#: b = ``micro_batch_size``, samples per micro-batch; each pipeline replica runs N = its batch share
#: / b micro-batches per step, and k divides N. k = 1 is 1F1B, k = N is GPipe.
KB_MEANING = (
    "(k, b): a kFkB schedule (Ada-Grouper §2.5, §4.2) runs k micro-batches' forward stages, then "
    "their k backward stages, as one group; b is the micro-batch size in samples. A pipeline "
    "replica runs N = (its share of the global batch) / b micro-batches per step in N / k groups: "
    "k = 1 is 1F1B, k = N is GPipe. Larger k overlaps more cross-stage transfer with compute but "
    "holds k micro-batches' activations; smaller b fits memory but computes less efficiently. "
    "The candidates are the (k, b) points on the memory-limit curve."
)

DEFAULTS: dict[str, Any] = {
    "stages": "choose",
    "memory_per_device_gb": None,
    "global_batch": None,
    "adaptive": True,
    "tuner_interval": 2,
}


def _bad(field: str, reason: str) -> OptionsInvalid:
    return OptionsInvalid([(("plan_options", field), reason)])


def max_stages(model: ModelSpec, cluster: ClusterSpec) -> int:
    return min(len(cluster.devices), len(model.layers))


class PipelinePlans(PlanKind):
    """Ada-Grouper pipeline plans (see the module docstring)."""

    name: ClassVar[str] = "pipeline"
    BASELINES: ClassVar[tuple[str, ...]] = ("1f1b",)

    def validate(
        self, options: dict[str, Any] | None, *, objective: str, model: ModelSpec, cluster: ClusterSpec
    ) -> dict[str, Any]:
        out = known_options(options, DEFAULTS, "pipeline")
        top = max_stages(model, cluster)
        stages = out["stages"]
        if stages != "choose" and (
            isinstance(stages, bool) or not isinstance(stages, int) or not 2 <= stages <= top
        ):
            raise _bad(
                "stages",
                f"must be an int in [2, {top}] (devices {len(cluster.devices)}, layers {len(model.layers)}) "
                f'or "choose", got {stages!r}',
            )
        if stages == "choose" and top < 2:
            raise _bad(
                "stages", f"a pipeline needs 2 devices and 2 layers; {cluster.name} x {model.name} has {top}"
            )
        mem = out["memory_per_device_gb"]
        if mem is not None:
            smallest = min(dt.memory_gb for dt in cluster.device_types)
            if (
                isinstance(mem, bool)
                or not isinstance(mem, int | float)
                or not math.isfinite(mem)
                or mem <= 0
            ):
                raise _bad("memory_per_device_gb", f"must be a positive finite number of GB, got {mem!r}")
            if mem > smallest:
                raise _bad(
                    "memory_per_device_gb", f"{mem:g} GB exceeds the smallest device's {smallest:g} GB"
                )
            out["memory_per_device_gb"] = float(mem)
        gb = out["global_batch"]
        if gb is None:
            out["global_batch"] = model.batch_size
        elif isinstance(gb, bool) or not isinstance(gb, int) or not 1 <= gb <= LIMITS.global_batch:
            raise _bad("global_batch", f"must be an int in [1, {LIMITS.global_batch}], got {gb!r}")
        if not isinstance(out["adaptive"], bool):
            raise _bad("adaptive", f"must be true or false, got {out['adaptive']!r}")
        ti = out["tuner_interval"]
        if isinstance(ti, bool) or not isinstance(ti, int) or not 1 <= ti <= LIMITS.iterations:
            raise _bad("tuner_interval", f"must be an int in [1, {LIMITS.iterations}], got {ti!r}")
        n = len(cluster.devices)
        if stages != "choose" and n % stages:
            raise _bad(
                "stages", f"{stages} does not divide the {n} devices (every stage gets devices // stages)"
            )
        if not stage_counts(model, cluster, out):
            counts = "any stage count" if stages == "choose" else f"{stages} stages"
            raise _bad(
                "global_batch",
                f"{out['global_batch']} does not split evenly over the pipeline replicas of {n} devices with {counts}",
            )
        return out

    def baselines(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        options: dict[str, Any],
        names: tuple[str, ...],
        profiles: tuple[Profile, ...] | None = None,
    ) -> dict[str, dict[str, Any]]:
        if "1f1b" not in names:
            return {}
        scored = scored_documents(model, cluster, options, profiles=profiles)
        if not scored:
            return {}
        from runtime.worker.plan_pipeline import PipelineTrial

        best = scored[0][1]
        memory = memory_model(model, cluster, options)
        plan = largest_1f1b(best.candidates[0], memory)
        if plan is None:
            return {}
        trial = PipelineTrial(candidates=(plan,), adaptive=False, profiles=profiles)
        return {"1f1b": trial.model_dump(mode="json")}

    def plan_round(
        self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any], ask: RoundAsk
    ) -> RoundPlan:
        scored = scored_documents(model, cluster, options, profiles=ask.profiles)
        return ranked_round(scored, ask, _features, "pipeline-cost-model")


def _features(doc: Any) -> tuple[int, int, int]:
    p: Plan = doc.plan
    return (len(p.stages), p.group_size(p.replica_micro_batches(0)), p.micro_batch_size)


def memory_model(model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]) -> MemoryModel:
    """The planner's memory model; ``memory_per_device_gb`` replaces every device's usable memory."""
    gb = options.get("memory_per_device_gb")
    if gb is None:
        return MemoryModel(model, cluster, MemoryConfig())
    data = cluster.model_dump()
    data["device_types"] = [{**dt, "memory_gb": float(gb)} for dt in data["device_types"]]
    # validated afresh: a model_copy would keep the original's cached per-node device lookups
    return MemoryModel(model, ClusterSpec.model_validate(data), MemoryConfig(device_usable=1.0))


def stage_counts(model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]) -> list[int]:
    """Stage counts P to try: P divides the devices and the batch splits over the D = devices / P replicas."""
    n = len(cluster.devices)
    wanted = (
        range(2, max_stages(model, cluster) + 1) if options["stages"] == "choose" else [options["stages"]]
    )
    return [p for p in wanted if n % p == 0 and options["global_batch"] % (n // p) == 0]


def scored_documents(
    model: ModelSpec,
    cluster: ClusterSpec,
    options: dict[str, Any],
    profiles: tuple[Profile, ...] | None = None,
) -> list[tuple[float, Any]]:
    """Every candidate document (each point of each partition's memory curve) with its predicted
    seconds, fastest first (ties: fewer stages, then smaller k); ``profiles``: the measured profiles
    ranked with, carried by every document (None: the profile store's), through the replay's
    CostParams (``store_cost_params``, what ``PipelineConfig.cost_params`` computes)."""
    from runtime.worker.plan_pipeline import PipelineTrial
    from search.hybrid import InfeasibleBalance, InfeasiblePartition, balanced_pipeline, pipeline
    from search.hybrid.plans import all_devices
    from simulator.hybrid import predict

    params = store_cost_params(model.name, profiles=profiles)
    memory = memory_model(model, cluster, options)
    devices = all_devices(cluster)
    gb = int(options["global_batch"])
    out: list[tuple[float, tuple[int, int, int], Any]] = []
    for P in stage_counts(model, cluster, options):
        try:
            choice = balanced_pipeline(model, memory.cluster, memory, devices, P, gb, 1)
        except (InfeasiblePartition, InfeasibleBalance, ValueError):
            continue
        template = choice.plan.to_plan()
        curve = memory_curve(template, memory)
        if not curve:
            continue
        plans = tuple(c.plan for c in curve)
        stage_devices = [st.devices for st in template.stages]
        ranges = choice.partition.ranges
        for i, c in enumerate(curve):
            hp = pipeline(model, cluster, stage_devices, ranges, gb, c.micro_batch_size,
                          schedule=c.plan.schedule, k=c.plan.k)  # fmt: skip
            seconds = predict(model, cluster, hp, params).seconds
            doc = PipelineTrial(
                candidates=plans,
                start=i,
                adaptive=options["adaptive"],
                tuner_interval=options["tuner_interval"],
                profiles=profiles,
            )
            out.append((seconds, (P, c.k, c.micro_batch_size), doc))
    out.sort(key=lambda x: (x[0], x[1]))
    return [(s, doc) for s, _, doc in out]


def largest_1f1b(template: Plan, memory: MemoryModel) -> Plan | None:
    """1F1B with the largest micro-batch that fits on ``template``'s partition (None: none fits)."""
    per_replica = template.replica_micro_batches(0) * template.micro_batch_size
    for b in range(per_replica, 0, -1):
        if per_replica % b:
            continue
        plan = with_kb(template, 1, b)
        if all(v.fits for v in plan_memory(plan, memory)):
            return plan
    return None
