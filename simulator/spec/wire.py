"""The trial wire format: what a worker and the service say to each other about a trial.

One definition, imported by both ends: the API's request and response schemas for the worker
endpoints are these models (``service.api.schemas.trials`` adds only the public view of the
trial to the claim and report answers), the repository answers a heartbeat with ``HeartbeatAck``,
and the worker (``runtime.worker.api``) builds its requests and reads the answers with them
instead of picking fields out of JSON by hand.

- ``POST /api/v1/workers/claim``: ``ClaimRequest`` → ``TrialClaim`` (204: nothing queued). The
  claim names the trial (``ClaimedTrial``: its id and plan document), the ``attempt`` and
  ``claim_token`` every later message must quote, and the model and cluster specs as stored.
- ``POST /api/v1/trials/{id}/heartbeat``: ``Heartbeat`` → ``HeartbeatAck``.
- ``POST /api/v1/trials/{id}/report``: ``Report`` (with the ``Measurement``) → ``ReportAck`` (with
  the trial as it ended).

Decisions: requests forbid unknown fields (a typo is a 422 naming it), answers ignore them (a
newer service may add fields without breaking older workers). The plan document and the model and
cluster specs travel as JSON objects: the plan document's kind decides how it is validated (a
Strategy, or another plan kind's document, ``runtime.worker.plans``), and the specs are validated
with their field paths by ``simulator.spec.io.parse_as`` where they are used (``TrialClaim.specs``).
"""

from __future__ import annotations

from typing import Annotated, Any, Generic

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar

from simulator.spec.cluster import ClusterSpec
from simulator.spec.io import parse_as
from simulator.spec.limits import INT4_MAX, Label, Name
from simulator.spec.measurement import Measurement
from simulator.spec.model import ModelSpec

#: A stored trial's id, attempt count (PostgreSQL ``integer``).
_Int4 = Annotated[int, Field(ge=1, le=INT4_MAX)]
#: The secret of one claim (32 hex characters as issued).
ClaimToken = Annotated[Name, Field(max_length=64)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", from_attributes=True)


class ClaimRequest(_Request):
    """A worker asks for a trial on one of the clusters it can run."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"clusters": ["B1"], "worker": "gpu-host-3", "pool": "testbed"}]},
    )

    clusters: list[Name] = Field(
        min_length=1, max_length=1000, fail_fast=True, description="Cluster names this worker can run."
    )
    worker: Label = Field("", description="Worker name; default: the token's user name.")
    pool: Label = Field("", max_length=64, description="'testbed' or 'gpu' (informational).")
    trial_id: _Int4 | None = Field(None, description="Claim exactly this trial (e.g. from a queue nudge).")


class ClaimedTrial(_Answer):
    """What a worker needs of the claimed trial: which one, and the plan document to run."""

    id: int
    strategy: dict[str, Any] = Field(
        description="The plan document: a Strategy, or another plan kind's document (its 'kind' names it)."
    )


#: The trial a claim or a report answer carries: ``ClaimedTrial`` (id and plan document) for a
#: worker reading the answer; the service's repository fills in its full domain ``Trial`` and the
#: API its public view (``TrialClaim[TrialPublic]``), both with these same fields around it.
TrialT = TypeVar("TrialT", default=ClaimedTrial)


class TrialClaim(_Answer, Generic[TrialT]):
    """The claimed trial with everything needed to run it; quote attempt and claim_token afterwards.

    One definition for the worker, the API's answer and the repository's return value
    (``service.db.repo_trials.claim_trial`` returns ``TrialClaim[Trial]``).
    """

    trial: TrialT
    attempt: int
    claim_token: str
    model: dict[str, Any]
    cluster: dict[str, Any]
    model_factory: str | None = Field(
        None,
        description="The search's own model ('module:function', importable on the worker) whose module a"
        " gpu-pool trial trains; None: the ModelSpec's layers.",
    )

    def specs(self) -> tuple[ModelSpec, ClusterSpec]:
        """The model and cluster, validated (SpecError naming the field path otherwise)."""
        return parse_as(ModelSpec, self.model), parse_as(ClusterSpec, self.cluster)


class Heartbeat(_Request):
    """The claim holder is alive (it quotes its claim)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"attempt": 1, "claim_token": "9f2c...", "worker": "w1"}]},
    )

    attempt: _Int4
    claim_token: ClaimToken
    worker: Label = ""


class HeartbeatAck(_Answer):
    """The service's answer to a heartbeat."""

    accepted: bool = Field(description="False: the claim is stale (requeued/finished); abandon the trial.")
    stop: bool = Field(description="True: the search was cancelled; stop the trial.")


class Report(_Request):
    """The trial's measurement, reported once by the claim holder."""

    model_config = ConfigDict(
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

    attempt: _Int4
    claim_token: ClaimToken
    worker: Label = ""
    measurement: Measurement


class ReportAck(_Answer, Generic[TrialT]):
    """The service's answer to a report: whether it was recorded, and the trial after it.

    One definition for the worker, the API's answer and the repository's return value
    (``service.db.repo_trials.report_trial`` returns ``ReportAck[Trial]``).
    """

    recorded: bool = Field(description="False for a duplicate or stale report (nothing changed).")
    trial: TrialT
