"""One result shape for every plan kind: the best measured plan, its baseline, the ratio, and the recommendation.

A search of any kind (sync, pipeline, hybrid, heterogeneous) answers the same questions, read by
the API (``SearchStatusPublic.result``), the client (``best_plan``), the CLI and the dashboard:

- **best**: the kind's best measured candidate. Time kinds (sync, pipeline, hybrid): the smallest
  median iteration time. Heterogeneous (objective money): the cheapest measured plan meeting the
  throughput limit (``service.plans.heterogeneous_results``).
- **baseline**: the strongest measured baseline it is compared with. Sync: the fastest tuned
  baseline family of the winner's space (lossless vs lossless, lossy vs lossy); pipeline (1F1B) and
  hybrid (even shares): the fastest measured baseline trial; heterogeneous: the cheapest measured
  baseline meeting the limit.
- **ratio** = baseline / best (median time, or money for heterogeneous): > 1 the search's plan is
  better; **slower** is true when ratio < 1, and the verdict then says to keep the baseline.
- **recommended**: the simplest plan within the measurement noise of the best (``RULE``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.orm import Session

from search.speedup import bootstrap_ratio
from service.db import repository as repo
from service.domain import Candidate, SearchStatus, Trial
from service.plans import plan_kind

#: Two medians closer than this are not told apart, whatever the bootstrap says: the repeatability
#: of a trial on a shared testbed host (and the only noise estimate of a one-iteration trial).
NOISE_FLOOR = 0.01
#: The rule looks at this many fastest candidates (a request's work stays bounded: ~1 ms each).
RECOMMEND_POOL = 32
#: Bootstrap resamples per comparison (the 95 % interval's ends move < 1 % beyond a few hundred).
RULE_BOOTSTRAP = 1000

RULE = (
    f"recommended = the simplest of the {RECOMMEND_POOL} fastest measured candidates within the "
    "measurement noise of the best: a "
    "candidate c is within noise of the best b when the 95 % bootstrap interval of "
    f"median(c) / median(b) reaches down to {1 + NOISE_FLOOR:.2f} or below (c is not shown to be "
    f"more than {NOISE_FLOOR:.0%} slower); simplest = fewest PS servers, then PS shards, then "
    "all-reduce groups, then partitioned variables (sync); fewest stages (pipeline); fewest "
    "TaskGraphs, then split ones (hybrid); fewest stages, then units (heterogeneous); ties go to "
    "the faster median"
)

Metric = Literal["time", "money"]


@dataclass(frozen=True)
class Pick:
    """One measured plan of a result: a candidate trial or a baseline."""

    trial_id: int
    label: str  # 'trial:<id>' or the baseline's name
    description: str  # what the plan does, in one line
    value: float  # median iteration time (s), or money (heterogeneous)


@dataclass(frozen=True)
class PlanResult:
    """The answer of a search, the same for every plan kind (see the module docstring)."""

    plan_kind: str
    metric: Metric
    best: Pick | None
    baseline: Pick | None
    ratio: float | None
    slower: bool
    recommended: Pick | None
    recommended_reason: str
    verdict: str
    rule: str = RULE


def _shards(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [sh for v in doc.get("variables", []) for sh in v.get("shards", [])]


def complexity(doc: dict[str, Any]) -> tuple[int, ...]:
    """How complicated a plan document is to run and reason about (smaller is simpler)."""
    kind = doc.get("kind")
    if kind == "pipeline":
        cands = doc.get("candidates") or [{}]
        plan = cands[int(doc.get("start", 0))]
        return (len(plan.get("stages", [])),)
    if kind == "hybrid":
        graphs = doc.get("task_graphs", [])
        return (len(graphs), sum(1 for g in graphs if g.get("primitive") == "split"))
    if kind == "heterogeneous_plan":
        stages = doc.get("plan", {}).get("stages", [])
        return (len(stages), sum(int(s.get("units", 0)) for s in stages))
    if kind == "hybrid_3d":  # fewest stages, then TP degree, then ZeRO stage
        lay = doc.get("layout", {})
        return (int(lay.get("pp", 1)), int(lay.get("tp", 1)), int(doc.get("zero_stage", 0)))
    shards = _shards(doc)
    ps = [sh for sh in shards if sh.get("kind") == "ps"]
    groups = {sh.get("group", 0) for sh in shards if sh.get("kind") != "ps"}
    split = sum(1 for v in doc.get("variables", []) if v.get("partition", {}).get("shards", 1) > 1)
    return (len({sh.get("server") for sh in ps}), len(ps), len(groups), split)


def describe(doc: dict[str, Any]) -> str:
    """One line: what the plan document does."""
    kind = doc.get("kind")
    if kind == "pipeline":
        cands = doc.get("candidates") or [{}]
        plan = cands[int(doc.get("start", 0))]
        return (
            f"pipeline, {len(plan.get('stages', []))} stages, {plan.get('schedule', '?')} micro-batch "
            f"{plan.get('micro_batch_size', '?')}{', tuned' if doc.get('adaptive') else ''}"
        )
    if kind == "hybrid":
        graphs = doc.get("task_graphs", [])
        prims = ", ".join(f"{g.get('primitive', 'replicate')}×{g.get('degree', 1)}" for g in graphs)
        return f"hybrid {doc.get('name') or ''}: {len(graphs)} TaskGraphs [{prims}]".replace("  ", " ")
    if kind == "heterogeneous_plan":
        stages = doc.get("plan", {}).get("stages", [])
        units = ", ".join(f"{s.get('resource_type')}×{s.get('units')}" for s in stages)
        return f"heterogeneous, {len(stages)} stages [{units}] by {doc.get('scheduler', '?')}"
    if kind == "hybrid_3d":
        from simulator.threed.document import ThreeDDocument

        d3 = ThreeDDocument.model_validate(doc)
        return f"3D {d3.summary()}; {d3.memory_line()}"
    servers, ps, groups, split = complexity(doc)
    parts = [f"{len(_shards(doc)) - ps} shards all-reduce in {groups} group(s)"] if groups else []
    if ps:
        parts.append(f"{ps} shards on {servers} PS server(s)")
    if split:
        parts.append(f"{split} variable(s) partitioned")
    return "; ".join(parts) or "empty strategy"


def within_noise(candidate: Sequence[float], best: Sequence[float]) -> bool:
    """True when ``candidate`` is not shown to be slower than ``best`` by more than the noise (``RULE``)."""
    low, _ = bootstrap_ratio(candidate, best, n=RULE_BOOTSTRAP)  # median(candidate) / median(best)
    return low <= 1 + NOISE_FLOOR


def recommend(measured: Sequence[Trial]) -> tuple[Trial | None, str]:
    """The simplest succeeded candidate trial within the noise of the fastest (``RULE``), and why."""
    done = [t for t in measured if t.median_time is not None and t.iteration_times]
    if not done:
        return None, "no measured candidate yet"
    done = sorted(done, key=lambda t: (t.median_time or 0.0, t.id))[:RECOMMEND_POOL]
    best = done[0]
    close = [t for t in done if within_noise(t.iteration_times, best.iteration_times)]
    pick = min(close, key=lambda t: (complexity(t.strategy), t.median_time or 0.0, t.id))
    if pick.id == best.id:
        return best, "the fastest measured candidate is also the simplest within the noise"
    gap = (pick.median_time or 0.0) / (best.median_time or 1.0) - 1
    return pick, (
        f"trial {pick.id} is {gap:+.1%} from the fastest (trial {best.id}), within the measurement "
        f"noise, and simpler ({describe(pick.strategy)})"
    )


def _pick(t: Trial, value: float) -> Pick:
    label = t.baseline if t.baseline else f"trial:{t.id}"
    return Pick(trial_id=t.id, label=label, description=describe(t.strategy), value=value)


def _time_baseline(status: SearchStatus, trials: Sequence[Trial]) -> Trial | None:
    by_id = {t.id: t for t in trials}
    if status.search.plan_kind == "sync":
        report = next(
            (r for r in status.reports if r.winner and r.winner.label == f"trial:{status.best_trial_id}"),
            None,
        )
        ratios = report.ratios if report else ()
        strongest = min(ratios, key=lambda r: (r.ratio, r.family), default=None)
        if strongest is None:
            return None
        return next((t for t in trials if t.baseline == strongest.baseline and t.median_time), None)
    measured = [
        by_id[b.trial_id] for b in status.baselines if b.median_time is not None and b.trial_id in by_id
    ]
    return min(measured, key=lambda t: (t.median_time or 0.0, t.id), default=None)


def plan_result(
    status: SearchStatus,
    trials: Sequence[Trial],
    money: dict[int, float] | None = None,
    predicted: Sequence[Candidate] = (),
) -> PlanResult:
    """The result of a search from its status (best already the kind's best) and its trials.

    ``money``: trial id -> measured money, for a heterogeneous search (its metric); the caller reads
    it from ``heterogeneous_results``. The baseline of a heterogeneous search is its cheapest
    measured baseline trial that has money. ``predicted``: the candidates of a predicted-only search
    (``PlanKind.predicted_only``), whose verdict names the predicted fastest.
    """
    kind = status.search.plan_kind
    by_id = {t.id: t for t in trials}
    best_t = by_id.get(status.best_trial_id) if status.best_trial_id is not None else None
    if kind == "heterogeneous":
        money = money or {}
        best = _pick(best_t, money[best_t.id]) if best_t and best_t.id in money else None
        bases = [t for t in trials if t.baseline and t.id in money]
        base_t = min(bases, key=lambda t: (money[t.id], t.id), default=None)
        base = _pick(base_t, money[base_t.id]) if base_t else None
        return _finish(kind, "money", best, base, best, "cost objective: the cheapest plan meeting the limit")
    best = _pick(best_t, best_t.median_time) if best_t and best_t.median_time is not None else None
    base_t = _time_baseline(status, trials) if best else None
    base = _pick(base_t, base_t.median_time) if base_t and base_t.median_time is not None else None
    space = None
    if kind == "sync" and best_t is not None:
        from search.space import space_of
        from simulator.spec import Strategy

        space = space_of(Strategy.model_validate(best_t.strategy))
    candidates = [
        t
        for t in trials
        if t.baseline is None and t.state == "succeeded" and (space is None or _space(t) == space)
    ]
    rec_t, reason = recommend(candidates)
    rec = _pick(rec_t, rec_t.median_time) if rec_t and rec_t.median_time is not None else None
    out = _finish(kind, "time", best, base, rec, reason)
    return _predicted_only(out, predicted) if best is None else out


def _predicted_only(result: PlanResult, predicted: Sequence[Candidate]) -> PlanResult:
    """A search of 3D plans (issue 42) has no measured candidate and no trial: its verdict says so
    and names the predicted fastest candidate as a prediction, with how many plans the memory model
    dropped. ``best`` and ``recommended`` stay empty: a prediction is never shown as a measurement
    (the ranking itself is the search's candidates, ``GET /searches/{id}/candidates``)."""
    docs = [c for c in predicted if c.strategy.get("kind") == "hybrid_3d"]
    if not docs:
        return result
    top = min(docs, key=lambda c: (c.predicted_time, c.round_index, c.rank))
    first = top.strategy
    dropped = ""
    if first.get("enumerated") is not None:
        dropped = (
            f"; {first.get('out_of_memory_dropped')} of {first['enumerated']} enumerated plans were "
            "dropped as predicted out of memory"
        )
    verdict = (
        f"no measured candidate: 3D plans are predicted only (no worker runs them, none is queued); "
        f"predicted ranking of {len(docs)} plans, fastest candidate:{top.id}, {describe(first)}, "
        f"{_fmt('time', top.predicted_time)} per iteration{dropped}"
    )
    reason = "nothing measured: 3D plans are predicted only, so no plan is recommended"
    return PlanResult(result.plan_kind, result.metric, None, None, None, False, None, reason, verdict)


def _space(t: Trial) -> str:
    from search.space import space_of
    from simulator.spec import Strategy

    return space_of(Strategy.model_validate(t.strategy))


def _finish(
    kind: str, metric: Metric, best: Pick | None, base: Pick | None, rec: Pick | None, reason: str
) -> PlanResult:
    ratio = base.value / best.value if best and base and best.value > 0 else None
    slower = ratio is not None and ratio < 1
    what = "speed-up" if metric == "time" else "saving"
    if best is None:
        verdict = "no measured candidate yet"
    elif ratio is None or base is None:
        verdict = f"best {best.label}: {_fmt(metric, best.value)}; no measured baseline yet"
    elif slower:
        verdict = f"{ratio:.2f}x {what} vs {base.label}: slower than its baseline; keep {base.label}"
    else:
        verdict = (
            f"{ratio:.2f}x {what} vs {base.label} ({_fmt(metric, base.value)} -> {_fmt(metric, best.value)})"
        )
    return PlanResult(kind, metric, best, base, ratio, slower, rec, reason, verdict)


def _fmt(metric: Metric, v: float) -> str:
    if metric == "money":
        return f"${v:,.2f}"
    return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"


def load_plan_result(session: Session, status: SearchStatus, *, owner_id: int | None = None) -> PlanResult:
    """``plan_result`` of a stored search (``status``: after ``cheapest_as_best``)."""
    trials = repo.list_trials(session, search_id=status.search.id, owner_id=owner_id)
    money: dict[int, float] = {}
    if status.search.plan_kind == "heterogeneous":
        from service.plans.heterogeneous_results import load_results

        plans = load_results(session, search_id=status.search.id, owner_id=owner_id).plans
        money = {p.trial_id: p.measured_money for p in plans if p.trial_id and p.measured_money is not None}
    predicted: list[Candidate] = []
    kind = plan_kind(status.search.plan_kind)
    if kind is not None and kind.predicted_only(status.search.plan_options):
        predicted = repo.list_candidates(session, search_id=status.search.id, owner_id=owner_id)
    return plan_result(status, trials, money, predicted)


def worker_hint(trials: Sequence[Trial]) -> str:
    """The command that would serve a search's queued trials: a worker advertising their clusters."""
    clusters = sorted({t.cluster_name for t in trials if t.state == "queued"})
    if not clusters:
        return ""
    names = ",".join(clusters)
    return (
        f"to run them, start a worker for {names}: `strategist worker --pool testbed --api <this API URL> "
        f"--token <token> --clusters {names}` (emulated on this host), or --pool gpu on a host with "
        f"{names}'s GPUs; the token: for a zoo cluster a worker token (`strategist token create --role "
        "worker`, as the admin, once), for a cluster you uploaded your own token (docs/service.md#trial-routing)"
    )
