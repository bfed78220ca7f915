"""Schemas of candidates and trials, and of the worker endpoints (claim, heartbeat, report)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.api.schemas.common import Id, Public
from simulator.spec.limits import INT4_MAX, Label, Name
from simulator.spec.measurement import Measurement


class CandidatePublic(Public):
    id: int
    search_id: int
    round_index: int
    rank: int = Field(description="1 = best predicted in its round.")
    strategy: dict[str, Any]
    predicted_time: float = Field(description="Simulator's predicted iteration time, s.")
    similarity: float = Field(description="Similarity to the round's other picks (Eq. 11).")
    status: Literal["proposed", "approved", "rejected"]
    decided_at: datetime | None
    scorer: str = Field(
        description="Which scorer ranked it: 'analytical' (Eq. 1-3), 'learned' (the transfer ensemble), "
        "'hybrid' (a blend where the ensemble is unsure), or a network kind.",
        examples=["hybrid"],
    )
    uncertainty: float | None = Field(
        description="The scorer's uncertainty; for learned/hybrid the ensemble's disagreement: std of "
        "its members' percentile ranks of the candidate in the round (0 = agree; >= 0.15 = analytical "
        "decides). Null for the analytical model."
    )


class CandidatesPublic(Public):
    data: list[CandidatePublic]
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class TrialPublic(Public):
    id: int
    search_id: int
    round_index: int | None = Field(description="Null for a baseline.")
    candidate_id: int | None
    baseline: str | None = Field(examples=["horovod"])
    cluster_name: str
    strategy: dict[str, Any]
    predicted_time: float | None
    state: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    attempt: int = Field(description="How many times it was claimed.")
    claimed_by: str | None
    heartbeat_at: datetime | None
    stop_requested: bool
    failure_reason: str | None
    iteration_times: list[float] = Field(examples=[[0.412, 0.405, 0.409]])
    median_time: float | None
    measurement: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class TrialsPublic(Public):
    data: list[TrialPublic]
    count: int = Field(description="Items on this page.")
    next_cursor: int | None = Field(
        None, description="Pass as ?cursor= for the next page; null on the last page."
    )


class DecisionPublic(Public):
    """A decided candidate and, when approved, its queued trial."""

    candidate: CandidatePublic
    trial: TrialPublic | None


class ClaimCreate(BaseModel):
    """A worker asks for a trial on one of the clusters it can run."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"clusters": ["B1"], "worker": "gpu-host-3", "pool": "testbed"}]},
    )

    clusters: list[Name] = Field(
        min_length=1, max_length=1000, fail_fast=True, description="Cluster names this worker can run."
    )
    worker: Label = Field("", description="Worker name; default: the token's user name.")
    pool: Label = Field("", max_length=64, description="'testbed' or 'gpu' (informational).")
    trial_id: Id | None = Field(None, description="Claim exactly this trial (e.g. from a queue nudge).")


class ClaimPublic(Public):
    """The claimed trial with everything needed to run it; quote attempt and claim_token afterwards."""

    trial: TrialPublic
    attempt: int
    claim_token: str
    model: dict[str, Any]
    cluster: dict[str, Any]


class HeartbeatCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"attempt": 1, "claim_token": "9f2c...", "worker": "w1"}]},
    )

    attempt: int = Field(ge=1, le=INT4_MAX)
    claim_token: Name = Field(max_length=64)
    worker: Label = ""


class HeartbeatPublic(Public):
    accepted: bool = Field(description="False: the claim is stale (requeued/finished); abandon the trial.")
    stop: bool = Field(description="True: the search was cancelled; stop the trial.")


class ReportCreate(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "attempt": 1,
                    "claim_token": "9f2c...",
                    "worker": "w1",
                    "measurement": {"iteration_times": [0.41, 0.40, 0.42], "warmup": 2},
                }
            ]
        },
    )

    attempt: int = Field(ge=1, le=INT4_MAX)
    claim_token: Name = Field(max_length=64)
    worker: Label = ""
    measurement: Measurement


class ReportPublic(Public):
    recorded: bool = Field(description="False for a duplicate or stale report (nothing changed).")
    trial: TrialPublic


class WorkerPublic(Public):
    id: int
    name: str
    user_id: int | None
    pool: str = Field(description="'testbed' or 'gpu' as the worker advertised it.", examples=["testbed"])
    clusters: list[str]
    last_seen_at: datetime = Field(description="Its last claim poll or trial heartbeat.")
    live: bool = Field(description="Seen within the service's heartbeat timeout.")
    current_trial_id: int | None = Field(description="The running trial it holds, if any.")


class WorkersPublic(Public):
    data: list[WorkerPublic]
    count: int
