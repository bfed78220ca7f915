"""The worker's HTTP client for the service API: claim a trial, heartbeat it, report its measurement.

Requests and answers are the trial wire format (``simulator.spec.wire``), the models the API's
schemas are made of: nothing here picks fields out of JSON by hand.

The worker never touches the database or the broker's state of a trial: the API (and behind it the
database) is the source of truth. Every call carries the worker token as a bearer token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from runtime.worker.plans import document_kind
from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.io import parse_as
from simulator.spec.measurement import Measurement
from simulator.spec.wire import ClaimRequest, Heartbeat, HeartbeatAck, Report, ReportAck, TrialClaim

API_PREFIX = "/api/v1"


@dataclass(frozen=True)
class ClaimedTrial:
    """A trial the API handed to this worker: what to run and how long to measure it."""

    id: int
    # The claim this worker holds: heartbeats and the report must quote it, so a worker whose
    # claim went stale (and was requeued to another) can neither heartbeat nor report.
    claim_token: str
    attempt: int
    model: ModelSpec
    cluster: ClusterSpec
    # A sync search's Strategy, else another plan kind's document as JSON (its "kind" names it;
    # the trial process validates and runs it: runtime.worker.plans).
    strategy: Strategy | dict[str, Any]
    # The search's own model ('module:function'); a gpu-pool worker trains that module
    # (``runtime.worker.factory_trial``); None: the ModelSpec's layers.
    model_factory: str | None = None

    @classmethod
    def of(cls, claim: TrialClaim) -> ClaimedTrial:
        """The claim answer (``simulator.spec.wire.TrialClaim``) with its specs validated."""
        doc = claim.trial.strategy
        model, cluster = claim.specs()
        return cls(
            id=claim.trial.id,
            claim_token=claim.claim_token,
            attempt=claim.attempt,
            model=model,
            cluster=cluster,
            strategy=parse_as(Strategy, doc) if document_kind(doc) == "strategy" else dict(doc),
            model_factory=claim.model_factory,
        )


@dataclass(frozen=True)
class HeartbeatReply:
    """What the API answered to a heartbeat."""

    # The trial was cancelled (its search was cancelled): stop running it and do not report.
    cancel: bool
    # The trial is no longer this worker's (requeued after a stale heartbeat, or finished).
    lost: bool


class ApiError(RuntimeError):
    """The API answered with an unexpected status."""


class TokenRefused(ApiError):
    """The API refused the worker's token (401: unknown or revoked; 403: not a worker token).

    Retrying cannot help, so the worker stops on it instead of polling forever.
    """


class ApiClient:
    """Thread-safe client of the worker endpoints (httpx.Client is safe to share between threads)."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 30.0, worker_name: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.worker_name = worker_name
        self._http = httpx.Client(
            base_url=self.base_url + API_PREFIX,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
        )

    def close(self) -> None:
        self._http.close()

    def claim(self, *, pool: str, clusters: list[str]) -> ClaimedTrial | None:
        """Claim the oldest queued trial on one of ``clusters``; None when there is none."""
        body = ClaimRequest(pool=pool, clusters=clusters, worker=self.worker_name)
        r = self._http.post("/workers/claim", json=body.model_dump(mode="json", exclude_none=True))
        if r.status_code == 204:
            return None
        _check(r, "claim")
        return ClaimedTrial.of(TrialClaim.model_validate_json(r.content))

    def heartbeat(self, trial: ClaimedTrial) -> HeartbeatReply:
        body = Heartbeat(claim_token=trial.claim_token, attempt=trial.attempt, worker=self.worker_name)
        r = self._http.post(f"/trials/{trial.id}/heartbeat", json=body.model_dump(mode="json"))
        if r.status_code in (404, 409):
            return HeartbeatReply(cancel=False, lost=True)
        _check(r, "heartbeat")
        ack = HeartbeatAck.model_validate_json(r.content)
        return HeartbeatReply(cancel=ack.stop, lost=not ack.accepted)

    def report(self, trial: ClaimedTrial, measurement: Measurement) -> bool:
        """Report a measurement; False when it was not recorded (a duplicate, a stale claim, cancelled)."""
        body = Report(
            claim_token=trial.claim_token,
            attempt=trial.attempt,
            worker=self.worker_name,
            measurement=measurement,
        )
        r = self._http.post(f"/trials/{trial.id}/report", json=body.model_dump(mode="json"))
        if r.status_code in (404, 409):
            return False
        _check(r, "report")
        return ReportAck.model_validate_json(r.content).recorded

    def release(self, trial: ClaimedTrial, reason: str = "") -> bool:
        """Hand the claimed trial back (a normal stop): requeued, attempt not spent; False if stale."""
        body = {
            "claim_token": trial.claim_token,
            "attempt": trial.attempt,
            "worker": self.worker_name,
            "reason": reason[:200],
        }
        r = self._http.post(f"/trials/{trial.id}/release", json=body)
        if r.status_code in (404, 409):
            return False
        _check(r, "release")
        return bool(r.json().get("released"))


def _check(r: httpx.Response, what: str) -> None:
    if r.status_code in (401, 403):
        raise TokenRefused(f"{what}: HTTP {r.status_code}: {_detail(r)}")
    if r.status_code >= 300:
        raise ApiError(f"{what}: HTTP {r.status_code}: {r.text[:300]}")


def _detail(r: httpx.Response) -> str:
    """The API's ``detail`` message, or the start of the body."""
    try:
        return str(r.json().get("detail", r.text[:300]))
    except ValueError:
        return r.text[:300]
