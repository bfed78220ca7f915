"""Cost-objective searches over heterogeneous resource types (HeterPS, issue 18): the 'heterogeneous' kind.

The user names a model, a cluster with priced ``resource_types`` (the zoo's HeterPS-2GPU and
HeterPS-4GPU, or an upload) and a throughput limit; the search finds layer-to-type schedules with
their provisioning (``simulator.spec.ResourcePlan``) at the least money (HeterPS Formulas 8-11),
with the scheduler named in the options (``search.heterogeneous``), and measures them.

**What a round proposes: the money vs throughput front.** The cheapest plan that meets the limit
is the answer under the cost model, but the cost model can be wrong, and the user's real question
("how much faster for how much more money?") is about the trade-off. So a round walks the front
upwards: its first plan is the scheduler's cheapest at the limit θ_0; each next one is the
scheduler's cheapest at θ_{j+1} = (1 + ``front_step``) × the throughput θ_P the previous plan
realises, i.e. the cheapest plan that is at least ``front_step`` faster. With the exact scheduler
these are points of the lower money-vs-throughput front (the cheapest plan for each throughput
level), spaced so that no two are near-duplicates. Plans already tried are skipped (and the walk
goes on from them), so round r continues where round r-1 stopped; when no schedule reaches the
next level the front is exhausted and the search completes (``RoundPlan`` with no drafts).
Candidates are ranked by predicted money (rank 1 = cheapest); a candidate's ``predicted_time``
is the predicted seconds of one iteration of B samples, B / θ_P.

**Baselines** are the paper's comparisons (Section 6): AIBox's heuristic plan, all-GPU and
all-CPU (``search.heterogeneous``), each provisioned for the limit; only the ones that can meet
the limit are kept (an infeasible baseline would never have a trial), and all are queued with the
first round.

**Bounded request work** (issue 44): the exact scheduler's arrays grow as (L+1)^2 T (T+1)^2 for
L layers and T resource types (a 1,000-layer model took 160 s and 3.3 GB in the API). ``validate``
runs the scheduler checks (is the limit reachable at all, which baselines meet it) only when that
size is at most `REQUEST_CELLS`; past it, the search is stored unchecked and the checks run in
the search's first bounded job (``baselines``, `service.loop.jobs`): an unreachable limit or a
named baseline that cannot meet it fails the search with the reason, a default baseline that
cannot is dropped (the loop stores the kept ones), and a job past its time or memory budget fails
the search saying so.

**Options** (``HeterogeneousOptions``, stored with defaults filled in): ``throughput_limit``
(samples/s, required), ``scheduler`` ('exact' by default: the DP of ``search.heterogeneous.exact``
is proved optimal under the cost model and takes milliseconds; 'rl' is the paper's LSTM +
REINFORCE and takes up to its 5 s time limit per plan), the workload (B, samples per epoch,
epochs: the money is that of training them, Formula 7-8), ``front_step`` and ``baselines``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.worker.plan_heterogeneous import DOC_KIND, HeterogeneousPlan, PlanCost, StageCost, plan_key
from service.domain import CandidateDraft, Search, Trial
from service.plans.base import OptionsInvalid, PlanKind, RoundAsk, RoundPlan
from simulator.spec import ClusterSpec, ModelSpec, ResourcePlan
from simulator.spec.limits import LIMITS
from simulator.spec.profile import Profile

if TYPE_CHECKING:
    from search.heterogeneous import Scheduler, ScheduleResult
    from simulator.analytical.heterogeneous import HeterogeneousCostModel

SchedulerName = Literal[
    "exact", "rl", "brute-force", "greedy", "bo-gp", "bo-tpe", "genetic", "aibox", "all-gpu", "all-cpu"
]
BaselineName = Literal["aibox", "all-gpu", "all-cpu"]
BASELINES: tuple[BaselineName, ...] = ("aibox", "all-gpu", "all-cpu")
#: Seconds a black-box scheduler (BO, genetic, brute force) may take for one plan of a round.
BLACK_BOX_SECONDS = 20.0
#: Throughput limits above this are refused (1e12 samples/s is far past any cluster).
MAX_THROUGHPUT = 1e12
#: The largest exact-scheduler problem, (L+1)^2 T (T+1)^2 cells, checked inside an API request
#: (CTRDNN on HeterPS-4GPU: ~14k cells, milliseconds); a larger one is checked in the search's job.
REQUEST_CELLS = 250_000
#: What a ``baselines`` job answers for a default baseline that cannot meet the limit.
INFEASIBLE = "infeasible"


def scheduler_cells(model: ModelSpec, cluster: ClusterSpec) -> int:
    """(L+1)^2 T (T+1)^2: the size of the exact scheduler's arrays for ``model`` on ``cluster``."""
    layers, types = len(model.layers), len(cluster.resource_types)
    return (layers + 1) ** 2 * types * (types + 1) ** 2


class HeterogeneousOptions(BaseModel):
    """A heterogeneous search's ``plan_options`` (the stored form has every default filled in)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    throughput_limit: float = Field(
        gt=0, le=MAX_THROUGHPUT, description="Samples per second the plan must reach (Formula 11)."
    )
    scheduler: SchedulerName = Field("exact", description="Which scheduler proposes the plans.")
    batch_size: int | None = Field(
        None,
        ge=1,
        le=LIMITS.batch_size,
        description="B, samples per iteration; None: the model's batch size.",
    )
    samples_per_epoch: float = Field(1e9, gt=0, le=1e15, description="M of Formula 7.")
    epochs: int = Field(1, ge=1, le=10_000, description="Epochs to train (money is for all of them).")
    front_step: float = Field(
        0.1, gt=0, le=10, description="Each next plan of a round is at least this much faster (0.1: 10 %)."
    )
    baselines: tuple[BaselineName, ...] | None = Field(
        None,
        description="Baseline plans to measure; None: those of aibox, all-gpu, all-cpu that meet the limit.",
    )


def cost_model(
    model: ModelSpec, cluster: ClusterSpec, options: HeterogeneousOptions
) -> HeterogeneousCostModel:
    """HeterPS's cost model of the search's model on the cluster's resource types for its workload."""
    from simulator.analytical.heterogeneous import HeterogeneousCostModel, Workload

    workload = Workload(
        options.throughput_limit,
        batch_size=options.batch_size or model.batch_size,
        samples_per_epoch=options.samples_per_epoch,
        epochs=options.epochs,
    )
    return HeterogeneousCostModel(model, cluster, workload)


def scheduler(name: str, seed: int = 0) -> Scheduler:
    """The ``search.heterogeneous`` scheduler named ``name`` (a SchedulerName)."""
    from search import heterogeneous as h

    if name == "rl":
        return h.RLScheduler(seed=seed)
    if name == "bo-gp":  # GP trials cost seconds each on CTR models (benchmarks/heterogeneous_scheduling.py)
        return h.OptunaScheduler("gp", trials=50, seed=seed, time_limit=BLACK_BOX_SECONDS)
    if name in ("bo-tpe", "genetic"):
        kind: Literal["tpe", "nsga2"] = "tpe" if name == "bo-tpe" else "nsga2"
        return h.OptunaScheduler(kind, trials=500, seed=seed, time_limit=BLACK_BOX_SECONDS)
    if name in ("all-gpu", "all-cpu"):
        return h.SingleTypeScheduler("gpu" if name == "all-gpu" else "cpu")
    if name == "brute-force":
        return h.BruteForceScheduler(time_limit=BLACK_BOX_SECONDS)
    if name == "greedy":
        return h.GreedyScheduler()
    if name == "aibox":
        return h.AIBoxScheduler()
    return h.ExactScheduler()


def document(cm: HeterogeneousCostModel, result: ScheduleResult, label: str) -> HeterogeneousPlan:
    """The plan document of a feasible schedule, with the cost model's prediction."""
    assert result.plan is not None
    report = cm.evaluate(result.plan)
    price = cm.price_per_s
    stages = tuple(
        StageCost(
            first_layer=st.first_layer,
            last_layer=st.last_layer,
            resource_type=st.resource_type,
            units=st.units,
            throughput=float(thr),
            price_per_hour=float(price[cm.type_index[st.resource_type]] * st.units * 3600.0),
        )
        for st, thr in zip(result.plan.stages, report.stage_throughput, strict=True)
    )
    return HeterogeneousPlan(
        plan=result.plan,
        scheduler=label,
        throughput_limit=cm.workload.throughput_limit,
        batch_size=cm.workload.batch_size,
        samples=cm.workload.samples,
        scheduler_seconds=result.seconds,
        predicted=PlanCost(
            money=report.money,
            throughput=report.throughput,
            price_per_hour=report.price_per_hour,
            training_time_s=report.training_time,
            stages=stages,
        ),
    )


def at_limit(cm: HeterogeneousCostModel, limit: float) -> HeterogeneousCostModel:
    """The same cost model with another throughput limit (the per-layer tables are shared)."""
    import copy
    import dataclasses

    out = copy.copy(cm)
    out.workload = dataclasses.replace(cm.workload, throughput_limit=limit)
    return out


def reachable(cm: HeterogeneousCostModel) -> tuple[float, ScheduleResult | None]:
    """The highest throughput any schedule reaches within the counts (to 0.1 %), and its plan.

    Feasibility is monotone in the limit (a plan meeting θ meets every lower limit), so this is a
    bisection on the exact scheduler's answer, in log space.
    """
    from search.heterogeneous import ExactScheduler

    exact = ExactScheduler()
    hi = cm.workload.throughput_limit
    lo = hi
    best: ScheduleResult | None = None
    while lo > 1e-6:
        lo /= 16.0
        r = exact.schedule(at_limit(cm, lo))
        if r.feasible:
            best = r
            break
    if best is None:
        return 0.0, None
    lo = max(lo, best.throughput)
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        r = exact.schedule(at_limit(cm, mid))
        if r.feasible:
            best, lo = r, max(mid, r.throughput)
        else:
            hi = mid
    return lo, best


def infeasible_reason(cm: HeterogeneousCostModel) -> str:
    """Why no schedule meets the limit, naming the stage that cannot (from the provisioning)."""
    from search.heterogeneous import Objective

    limit = cm.workload.throughput_limit
    top, best = reachable(cm)
    if best is None or best.plan is None:
        gpu = scheduler("all-gpu").schedule(cm)
        return f"no schedule reaches any throughput: {gpu.reason}"
    objective = Objective(cm)
    stage_reason = objective(tuple(cm.type_index[t] for t in best.plan.assignment)).reason
    return (
        f"{limit:g} samples/s cannot be met on {cm.cluster.name!r}: the most any schedule reaches is "
        f"{top:.4g} samples/s; with that schedule, {stage_reason}"
    )


class HeterogeneousPlans(PlanKind):
    """HeterPS schedules with provisioning at the least money under a throughput limit."""

    name = "heterogeneous"
    retrains = False  # the cost model is analytical; measurements are compared with it, not learned

    def validate(
        self, options: dict[str, Any] | None, *, objective: str, model: ModelSpec, cluster: ClusterSpec
    ) -> dict[str, Any]:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        if objective != "cost":
            issues.append((("objective",), "a heterogeneous search minimises money: use objective 'cost'"))
        if not cluster.resource_types:
            issues.append(
                (
                    ("cluster",),
                    f"cluster {cluster.name!r} declares no resource_types (priced CPU and GPU types); use"
                    " HeterPS-2GPU or HeterPS-4GPU, or upload a cluster with resource_types",
                )
            )
        if options is None:
            issues.append(
                (("plan_options",), "a heterogeneous search needs plan_options with throughput_limit")
            )
            raise OptionsInvalid(issues)
        try:
            opts = HeterogeneousOptions.model_validate(options)
        except ValidationError as e:
            issues += [(("plan_options", *err["loc"]), err["msg"]) for err in e.errors()]
            raise OptionsInvalid(issues) from None
        if issues:
            raise OptionsInvalid(issues)
        cm = cost_model(model, cluster, opts)
        if scheduler_cells(model, cluster) > REQUEST_CELLS:  # too big for a request: the job checks
            return opts.model_copy(update={"batch_size": cm.workload.batch_size}).model_dump(mode="json")
        if not scheduler("exact").schedule(cm).feasible:
            raise OptionsInvalid([(("plan_options", "throughput_limit"), infeasible_reason(cm))])
        names = opts.baselines if opts.baselines is not None else BASELINES
        kept: list[str] = []
        for i, name in enumerate(names):
            r = scheduler(name).schedule(cm)
            if r.feasible:
                kept.append(name)
            elif opts.baselines is not None:
                issues.append(
                    (("plan_options", "baselines", i), f"{name!r} cannot meet the limit: {r.reason}")
                )
        if issues:
            raise OptionsInvalid(issues)
        stored = opts.model_copy(update={"baselines": tuple(kept), "batch_size": cm.workload.batch_size})
        return stored.model_dump(mode="json")

    def due_baselines(self, search: Search, trials: Sequence[Trial]) -> tuple[str, ...]:
        stored = (search.plan_options or {}).get("baselines")
        return BASELINES if stored is None else tuple(stored)  # None: not checked yet (large model)

    def baselines(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        options: dict[str, Any],
        names: tuple[str, ...],
        profiles: tuple[Profile, ...] | None = None,
    ) -> dict[str, dict[str, Any]]:
        opts = HeterogeneousOptions.model_validate(options)
        cm = cost_model(model, cluster, opts)
        unchecked = scheduler_cells(model, cluster) > REQUEST_CELLS  # validate left the checks here
        if unchecked and not scheduler("exact").schedule(cm).feasible:
            raise ValueError(f"plan_options.throughput_limit: {infeasible_reason(cm)}")
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            r = scheduler(name).schedule(cm)
            if r.feasible:
                out[name] = document(cm, r, name).model_dump(mode="json")
            elif unchecked and opts.baselines is not None:
                raise ValueError(f"plan_options.baselines: {name!r} cannot meet the limit: {r.reason}")
            elif unchecked:  # a default baseline that cannot meet the limit: the loop drops it
                out[name] = {"kind": INFEASIBLE, "reason": r.reason}
        return out

    def plan_round(
        self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any], ask: RoundAsk
    ) -> RoundPlan:
        opts = HeterogeneousOptions.model_validate(options)
        cm = cost_model(model, cluster, opts)
        tried = {
            plan_key(ResourcePlan.model_validate(t["plan"])) for t in ask.tried if t.get("kind") == DOC_KIND
        }
        docs = front_walk(cm, opts, ask.k, tried, seed=ask.seed)
        return RoundPlan(drafts=tuple(drafts(docs)), scorer=f"heterps-{opts.scheduler}")


def front_walk(
    cm: HeterogeneousCostModel, opts: HeterogeneousOptions, k: int, tried: set[Any], *, seed: int
) -> list[HeterogeneousPlan]:
    """Up to ``k`` new plans up the money vs throughput front from the limit (module docstring)."""
    sched = scheduler(opts.scheduler, seed)
    out: list[HeterogeneousPlan] = []
    seen = set(tried)
    level = opts.throughput_limit
    while len(out) < k and level <= MAX_THROUGHPUT:
        r = sched.schedule(at_limit(cm, level))
        if not r.feasible or r.plan is None:
            break
        key = plan_key(r.plan)
        if key not in seen:
            seen.add(key)
            out.append(document(at_limit(cm, opts.throughput_limit), r, opts.scheduler))
        level = max(level, r.throughput) * (1.0 + opts.front_step)
    return out


def drafts(docs: Sequence[HeterogeneousPlan]) -> list[CandidateDraft]:
    """Candidate drafts ranked by predicted money; similarity: mean share of layers on the same type."""
    order = sorted(range(len(docs)), key=lambda i: (docs[i].predicted.money, i))
    types = [d.plan.assignment for d in docs]
    out = []
    for rank, i in enumerate(order, start=1):
        others = [j for j in range(len(docs)) if j != i]
        sim = (
            sum(sum(a == b for a, b in zip(types[i], types[j], strict=True)) / len(types[i]) for j in others)
            / len(others)
            if others
            else 0.0
        )
        doc = docs[i]
        out.append(
            CandidateDraft(
                rank=rank,
                strategy=doc.model_dump(mode="json"),
                predicted_time=doc.batch_size / doc.predicted.throughput,
                similarity=float(sim),
                scorer=f"heterps-{doc.scheduler}",
            )
        )
    return out
