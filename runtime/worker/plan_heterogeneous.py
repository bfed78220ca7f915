"""A heterogeneous (HeterPS, issue 18) search's trial: its plan document, and the runner that measures it.

The document (a candidate's or baseline's ``strategy`` JSON with ``"kind": "heterogeneous_plan"``)
is a ``ResourcePlan`` (layers -> resource types with the units of every stage) with the workload
it was provisioned for and the cost model's prediction; the service builds it
(``service.plans.heterogeneous``) and the worker runs it with
``runtime.heterogeneous.measure_plan``: every stage as processes on links shaped from its type's
figures, sparse lookups served by a real parameter server.

The Measurement's ``iteration_times`` are the seconds of each measured iteration of B samples
(B / the iteration's throughput: the slowest stage's period), in the real cluster's seconds;
``details`` holds the measured ``throughput`` (samples/s), ``money`` (USD, Formula 8 with the
measured throughput), ``price_per_hour``, the cost model's ``predicted_throughput`` and
``predicted_money``, and per stage its type, units, unit groups, measured period, compute and
communication seconds and the predicted B*CT_i and B*DT_i.

Worker options read here (the names ``runtime.heterogeneous.MeasureConfig`` shares with the
executor's): ``iterations``, ``warmup``, ``timeout_s``; ``heterogeneous_testbed`` (default True)
False runs the stages on unshaped loopback (logic checks only). Where network namespaces are not
usable the run falls back to loopback and says so in ``environment``.

This module imports only the spec at load time, so the service can build documents with it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.spec import ResourcePlan
from simulator.spec.measurement import Measurement

if TYPE_CHECKING:
    from runtime.worker.plans import TrialContext

DOC_KIND = "heterogeneous_plan"


class StageCost(BaseModel):
    """One stage of a plan as the cost model sees it (HeterPS Formulas 2-5)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    first_layer: int
    last_layer: int
    resource_type: str
    units: int = Field(description="k_i: units of the type provisioned for the stage.")
    throughput: float = Field(description="Throughput_i (Formula 5), samples/s.")
    price_per_hour: float = Field(description="p_t * k_i, USD per hour.")


class PlanCost(BaseModel):
    """A plan's predicted money and throughput (Formulas 6-8)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    money: float = Field(description="USD to train the workload (Formula 8).")
    throughput: float = Field(description="Samples/s: the slowest stage's (Formula 6).")
    price_per_hour: float = Field(description="Σ p_t k_i, USD per hour.")
    training_time_s: float = Field(description="Seconds to train the workload (Formula 7).")
    stages: tuple[StageCost, ...]


class HeterogeneousPlan(BaseModel):
    """The plan document a heterogeneous candidate or trial stores as its ``strategy``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["heterogeneous_plan"] = "heterogeneous_plan"
    plan: ResourcePlan = Field(description="Layers -> resource types with units per stage.")
    scheduler: str = Field(description="Who proposed it: a scheduler, or a baseline's name.")
    throughput_limit: float = Field(gt=0, description="Samples/s the search asks for.")
    batch_size: int = Field(ge=1, description="B, samples per iteration (a trial measures iterations of B).")
    samples: float = Field(gt=0, description="Samples the money is for (epochs * samples per epoch).")
    scheduler_seconds: float = Field(ge=0, description="Wall time the scheduler took for this plan.")
    predicted: PlanCost

    def key(self) -> tuple[tuple[int, int, str, int], ...]:
        """Identity of the plan (schedule and provisioning): two documents with one key are one plan."""
        return plan_key(self.plan)


def plan_key(plan: ResourcePlan) -> tuple[tuple[int, int, str, int], ...]:
    return tuple((s.first_layer, s.last_layer, s.resource_type, s.units) for s in plan.stages)


def measure_config(doc: HeterogeneousPlan, options: dict[str, Any]) -> Any:
    """The MeasureConfig of a trial: the document's workload, the worker's iterations and timeout."""
    from runtime.heterogeneous import MeasureConfig
    from runtime.testbed.netns import namespaces_usable
    from simulator.analytical.heterogeneous import Workload

    workload = Workload(
        doc.throughput_limit, batch_size=doc.batch_size, samples_per_epoch=doc.samples, epochs=1
    )
    known = {f.name for f in dataclasses.fields(MeasureConfig)} & {"iterations", "warmup", "timeout_s"}
    kwargs: dict[str, Any] = {k: options[k] for k in known if k in options}
    if kwargs.get("iterations", 8) <= kwargs.get("warmup", 2):
        kwargs["iterations"] = kwargs.get("warmup", 2) + 1
    testbed = bool(options.get("heterogeneous_testbed", True)) and namespaces_usable() is None
    return MeasureConfig(workload=workload, testbed=testbed, **kwargs)


def run(document: dict[str, Any], context: TrialContext) -> Measurement:
    """Measure a heterogeneous plan on the testbed; failures are Measurements."""
    from runtime.heterogeneous import measure_plan
    from runtime.testbed.netns import namespaces_usable

    doc = HeterogeneousPlan.model_validate(document)
    config = measure_config(doc, context.options)
    result = measure_plan(context.model, context.cluster, doc.plan, None, config=config)
    environment: dict[str, Any] = {**result.environment, "throughput_limit": doc.throughput_limit}
    if not config.testbed:
        environment["shaped"] = False
        environment["unshaped_reason"] = namespaces_usable() or "heterogeneous_testbed is off"
    if not result.ok:
        return Measurement(failure=result.reason or "the run failed", environment=environment)
    details = {
        "throughput": result.throughput,
        "money": result.money,
        "price_per_hour": result.price_per_hour,
        "predicted_throughput": result.predicted_throughput,
        "predicted_money": result.predicted_money,
        "stages": [dataclasses.asdict(s) for s in result.stages],
        "dilation": result.dilation,
        "wall_s": result.wall_s,
    }
    return Measurement(
        iteration_times=tuple(doc.batch_size / s for s in result.samples if s > 0),
        warmup=config.warmup,
        scale=result.scale,
        compute_mode="replay",
        backend="tcp",
        environment=environment,
        details=details,
    )
