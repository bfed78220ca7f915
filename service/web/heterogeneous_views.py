"""What the dashboard shows of a cost-objective (heterogeneous, HeterPS) search, as plain view data.

- The search page: cards (limit, best plan, savings), the money vs throughput chart of every
  evaluated plan (predicted as hollow markers, measured as filled ones joined to their prediction,
  each front drawn as a line, the limit as a vertical dashed line; plotly.js from the package's own
  bundle) and the plans table with every stage's type and units
  (``service.plans.heterogeneous_results``).
- A candidate's or trial's page: the plan's stages with units, predicted and measured per-stage
  throughput, and the plan's predicted and measured money and throughput.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from runtime.worker.plan_heterogeneous import DOC_KIND, HeterogeneousPlan
from service.domain import SearchStatus
from service.plans.heterogeneous_results import EvaluatedPlan, HeterogeneousResults, load_results


def stages_line(doc: HeterogeneousPlan) -> str:
    """'0-3 c5.24xlarge-core ×128 | 4-15 g4dn.12xlarge-T4 ×3'."""
    return " | ".join(
        f"{s.first_layer}-{s.last_layer - 1} {s.resource_type} ×{s.units}" for s in doc.plan.stages
    )


def _front_line(points: list[tuple[float, float]]) -> dict[str, list[float]]:
    pts = sorted(points)
    return {"x": [p[0] for p in pts], "y": [p[1] for p in pts]}


def front_chart(r: HeterogeneousResults) -> dict[str, Any]:
    """The chart's data: predicted and measured (throughput, money) per plan, both fronts, the limit."""

    def name(p: EvaluatedPlan) -> str:
        return f"{p.label} ({p.document.scheduler})"

    measured = [p for p in r.plans if p.measured and p.measured_money is not None]
    return {
        "limit": r.throughput_limit,
        "predicted": {
            "x": [p.document.predicted.throughput for p in r.plans],
            "y": [p.document.predicted.money for p in r.plans],
            "text": [name(p) for p in r.plans],
            "baseline": [p.baseline is not None for p in r.plans],
        },
        "measured": {
            "x": [p.measured_throughput for p in measured],
            "y": [p.measured_money for p in measured],
            "text": [name(p) for p in measured],
            "baseline": [p.baseline is not None for p in measured],
            "px": [p.document.predicted.throughput for p in measured],
            "py": [p.document.predicted.money for p in measured],
        },
        "predicted_front": _front_line(
            [
                (p.document.predicted.throughput, p.document.predicted.money)
                for p in r.plans
                if p.on_predicted_front
            ]
        ),
        "measured_front": _front_line(
            [(p.measured_throughput or 0.0, p.measured_money or 0.0) for p in measured if p.on_measured_front]
        ),
        "best": r.best.label if r.best else None,
    }


@dataclass(frozen=True)
class StageRow:
    index: int
    first_layer: int
    last_layer: int
    resource_type: str
    units: int
    price_per_hour: float
    predicted_throughput: float
    measured_throughput: float | None


@dataclass(frozen=True)
class HeterogeneousView:
    """A heterogeneous plan document and, once its trial succeeded, what was measured."""

    scheduler: str
    throughput_limit: float
    predicted_money: float
    predicted_throughput: float
    price_per_hour: float
    measured_money: float | None
    measured_throughput: float | None
    stages: list[StageRow]


def heterogeneous_view(document: dict[str, Any], details: dict[str, Any] | None) -> HeterogeneousView | None:
    """The view of a heterogeneous plan document (None for another kind)."""
    if document.get("kind") != DOC_KIND:
        return None
    doc = HeterogeneousPlan.model_validate(document)
    d = details or {}
    measured = [s for s in d.get("stages") or () if isinstance(s, dict)]
    rows = []
    for i, s in enumerate(doc.predicted.stages):
        period = measured[i].get("period_s") if i < len(measured) else None
        rows.append(
            StageRow(
                index=i,
                first_layer=s.first_layer,
                last_layer=s.last_layer,
                resource_type=s.resource_type,
                units=s.units,
                price_per_hour=s.price_per_hour,
                predicted_throughput=s.throughput,
                measured_throughput=doc.batch_size / period if period else None,
            )
        )
    thr = d.get("throughput")
    money = d.get("money")
    return HeterogeneousView(
        scheduler=doc.scheduler,
        throughput_limit=doc.throughput_limit,
        predicted_money=doc.predicted.money,
        predicted_throughput=doc.predicted.throughput,
        price_per_hour=doc.predicted.price_per_hour,
        measured_money=float(money) if isinstance(money, int | float) else None,
        measured_throughput=float(thr) if isinstance(thr, int | float) else None,
        stages=rows,
    )


@dataclass(frozen=True)
class PlanRow:
    """One row of the search page's plans table."""

    label: str
    trial_id: int | None
    state: str
    stages: str
    predicted_money: float
    predicted_throughput: float
    measured_money: float | None
    measured_throughput: float | None
    price_per_hour: float
    meets_limit: bool
    best: bool


def plan_rows(r: HeterogeneousResults) -> list[PlanRow]:
    """Every evaluated plan, cheapest predicted first."""
    best = r.best.label if r.best else None
    return [
        PlanRow(
            label=p.label,
            trial_id=p.trial_id,
            state=p.state,
            stages=stages_line(p.document),
            predicted_money=p.document.predicted.money,
            predicted_throughput=p.document.predicted.throughput,
            measured_money=p.measured_money,
            measured_throughput=p.measured_throughput,
            price_per_hour=p.document.predicted.price_per_hour,
            meets_limit=p.meets_limit,
            best=p.label == best,
        )
        for p in sorted(r.plans, key=lambda p: (p.document.predicted.money, p.label))
    ]


def cost_context(session: Session, status: SearchStatus) -> dict[str, Any]:
    """The search page's extra context for a heterogeneous search: results, chart data, table rows."""
    r = load_results(session, search_id=status.search.id)
    return {"costs": r, "front": front_chart(r), "plans": plan_rows(r)}
