"""Schemas of candidates and trials, and of the worker endpoints (claim, heartbeat, report)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from service.api.schemas.common import Public
from simulator.spec import wire
from simulator.spec.limits import Label


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


class TrialPublic(Public, wire.ClaimedTrial):
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


# The worker endpoints' bodies are the trial wire format (simulator.spec.wire, shared with the
# worker); the subclasses keep the schema names of the OpenAPI document and add only the public
# view of the trial (their trial type) to the claim and report answers.


class ClaimCreate(wire.ClaimRequest):
    """A worker asks for a trial on one of the clusters it can run."""


class ClaimPublic(wire.TrialClaim[TrialPublic]):
    """The claimed trial with everything needed to run it; quote attempt and claim_token afterwards."""


class HeartbeatCreate(wire.Heartbeat):
    """The claim holder is alive."""


class HeartbeatPublic(wire.HeartbeatAck):
    """``accepted``: the claim is current; ``stop``: the search was cancelled."""


class ReportCreate(wire.Report):
    """The trial's measurement."""


class ReportPublic(wire.ReportAck[TrialPublic]):
    """Whether the report was recorded, and the trial after it."""


class ReleaseCreate(wire.Heartbeat):
    """The claim holder hands its trial back (it is stopping normally): requeue it, attempt not spent."""

    reason: Label = Field(default="", description="Why it was handed back (shown in the log).")


class ReleasePublic(Public):
    """Whether the trial was handed back, and the trial after it."""

    released: bool = Field(description="False: the claim was no longer current (nothing changed).")
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
