"""Schemas of a cost-objective (heterogeneous) search's results: money, throughput and provisioning per plan."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from service.api.schemas.common import Public

if TYPE_CHECKING:
    from service.plans.heterogeneous_results import EvaluatedPlan, HeterogeneousResults


class StageCostPublic(Public):
    """One stage of a plan: its layers, resource type and units (k_i), predicted and measured."""

    first_layer: int
    last_layer: int = Field(description="One past the stage's last layer.")
    resource_type: str = Field(examples=["g4dn.12xlarge-T4"])
    units: int = Field(description="Units of the type provisioned for the stage (k_i).")
    price_per_hour: float = Field(description="USD per hour of the stage's units.")
    predicted_throughput: float = Field(description="Throughput_i of the cost model (Formula 5), samples/s.")
    measured_throughput: float | None = Field(
        None, description="B / the stage's measured period, samples/s (null until measured)."
    )


class PlanCostPublic(Public):
    """An evaluated plan (a candidate or a baseline): money, throughput and per-stage provisioning."""

    label: str = Field(examples=["candidate:12", "baseline:aibox"])
    candidate_id: int | None
    trial_id: int | None
    baseline: str | None = Field(examples=["aibox"])
    round_index: int | None
    rank: int | None = Field(description="1 = cheapest predicted in its round.")
    state: str = Field(description="The trial's state, or the candidate's status when it has no trial.")
    scheduler: str = Field(description="Who proposed the plan.", examples=["exact"])
    predicted_money: float = Field(description="USD to train the workload, cost model (Formula 8).")
    predicted_throughput: float = Field(description="Samples/s, cost model (Formula 6).")
    price_per_hour: float = Field(description="Σ p_t k_i, USD per hour.")
    measured_money: float | None = Field(description="USD with the measured throughput (Formula 8).")
    measured_throughput: float | None = Field(description="Samples/s measured on the testbed.")
    meets_limit: bool = Field(description="Measured throughput >= the limit (predicted until measured).")
    on_predicted_front: bool = Field(description="No other plan is predicted faster and cheaper.")
    on_measured_front: bool = Field(description="No other measured plan is measured faster and cheaper.")
    failure: str | None
    stages: list[StageCostPublic]
    plan: dict[str, Any] = Field(description="The ResourcePlan (layers -> types, units per stage).")

    @classmethod
    def of(cls, p: EvaluatedPlan) -> PlanCostPublic:
        doc = p.document
        measured = list(p.measured_stages) + [None] * (len(doc.predicted.stages) - len(p.measured_stages))
        stages = [
            StageCostPublic(
                first_layer=s.first_layer,
                last_layer=s.last_layer,
                resource_type=s.resource_type,
                units=s.units,
                price_per_hour=s.price_per_hour,
                predicted_throughput=s.throughput,
                measured_throughput=doc.batch_size / m["period_s"] if m and m.get("period_s") else None,
            )
            for s, m in zip(doc.predicted.stages, measured, strict=True)
        ]
        return cls(
            label=p.label,
            candidate_id=p.candidate_id,
            trial_id=p.trial_id,
            baseline=p.baseline,
            round_index=p.round_index,
            rank=p.rank,
            state=p.state,
            scheduler=doc.scheduler,
            predicted_money=doc.predicted.money,
            predicted_throughput=doc.predicted.throughput,
            price_per_hour=doc.predicted.price_per_hour,
            measured_money=p.measured_money,
            measured_throughput=p.measured_throughput,
            meets_limit=p.meets_limit,
            on_predicted_front=p.on_predicted_front,
            on_measured_front=p.on_measured_front,
            failure=p.failure,
            stages=stages,
            plan=doc.plan.model_dump(mode="json"),
        )


class CostsPublic(Public):
    """A cost-objective search's results: the best measured plan, every evaluated plan, the savings."""

    search_id: int
    throughput_limit: float = Field(description="Samples/s the plans must reach.")
    scheduler: str
    best: PlanCostPublic | None = Field(description="The cheapest measured plan meeting the limit, measured.")
    cheapest_predicted: PlanCostPublic | None = Field(
        description="The cheapest plan the cost model says meets the limit."
    )
    savings: dict[str, float] = Field(
        description="Baseline → its measured money / the best plan's (> 1: the search's plan is cheaper).",
        examples=[{"aibox": 1.34, "all-gpu": 1.05}],
    )
    plans: list[PlanCostPublic]

    @classmethod
    def of(cls, search_id: int, r: HeterogeneousResults) -> CostsPublic:
        return cls(
            search_id=search_id,
            throughput_limit=r.throughput_limit,
            scheduler=r.scheduler,
            best=PlanCostPublic.of(r.best) if r.best else None,
            cheapest_predicted=PlanCostPublic.of(r.cheapest_predicted) if r.cheapest_predicted else None,
            savings=r.savings,
            plans=[PlanCostPublic.of(p) for p in r.plans],
        )
