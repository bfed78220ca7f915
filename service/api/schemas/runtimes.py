"""Schemas of ingested runtimes, simulator versions and retraining requests."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from service.api.schemas.common import Public, SpecRef
from simulator.spec.limits import LIMITS
from simulator.spec.measurement import MeasuredOn


class RuntimeCreate(BaseModel):
    """Measured iteration times of a strategy from your own training run (feeds retraining).

    The example is for the model and cluster of the POST /models and POST /clusters examples.
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "model": "tiny-mlp",
                    "cluster": "two-node",
                    "strategy": {
                        "kind": "strategy",
                        "variables": [{"variable": "fc1.weight", "shards": [{"kind": "collective"}]}],
                    },
                    "iteration_times": [0.41, 0.40, 0.43],
                }
            ]
        },
    )

    model: SpecRef = Field(description="Model name (yours, else the zoo's, any case) or id.")
    cluster: SpecRef = Field(description="Cluster name (yours, else the zoo's, any case) or id.")
    strategy: dict[str, Any] = Field(description="A Strategy JSON valid for the model on the cluster.")
    iteration_times: list[Annotated[float, Field(gt=0, le=LIMITS.seconds, allow_inf_nan=False)]] = Field(
        min_length=1, max_length=LIMITS.iterations, fail_fast=True, description="Seconds."
    )
    measured_on: MeasuredOn | None = Field(
        None,
        description="Where you measured it: site 'cluster' (real nodes) or 'testbed', GPU types, "
        "torchrun run id. Unsaid, the learned simulators count it as the testbed's (and say so).",
    )


class RuntimePublic(Public):
    id: int
    domain: str = Field(examples=["ResNet50__B1"])
    model_name: str
    cluster_name: str
    strategy: dict[str, Any]
    iteration_times: list[float]
    median_time: float
    source: Literal["trial", "user"]
    search_id: int | None
    trial_id: int | None
    user_id: int | None
    created_at: datetime
    measured_on: MeasuredOn | None = Field(
        None,
        description="Where it was measured (site, pool, GPU types, torchrun run id); null: not recorded.",
    )

    @computed_field(description="'cluster' (real nodes), 'testbed' (emulated) or null (not recorded).")  # type: ignore[prop-decorator]
    @property
    def site(self) -> str | None:
        return None if self.measured_on is None else self.measured_on.site


class RuntimesPublic(Public):
    data: list[RuntimePublic]
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class SimulatorVersionPublic(Public):
    id: int
    domain: str
    kind: str = Field(examples=["gat"])
    version: int
    metrics: dict[str, Any] = Field(examples=[{"kendall_tau": 0.71, "pairwise_accuracy": 0.85}])
    path: str | None
    n_records: int = Field(description="Runtime records it was trained on.")
    created_at: datetime


class SimulatorVersionsPublic(Public):
    data: list[SimulatorVersionPublic]
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class RetrainCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"domain": "ResNet50__B1"}]})

    domain: str = Field(
        min_length=3,
        max_length=2 * LIMITS.spec_name_chars + 2,
        pattern=r"^[^\x00-\x1f\x7f-\x9f]+__[^\x00-\x1f\x7f-\x9f]+$",
        description="'<model>__<cluster>': a model and a cluster you can use (your uploads or the zoo).",
    )


class RetrainRequestPublic(Public):
    id: int
    domain: str
    state: Literal["pending", "running", "done", "failed"]
    requested_by: int | None
    simulator_version_id: int | None
    error: str | None
    created_at: datetime
    finished_at: datetime | None


class RetrainRequestsPublic(Public):
    data: list[RetrainRequestPublic]
    count: int
