"""The worker's HTTP client for the service API: claim a trial, heartbeat it, report its measurement.

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

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClaimedTrial:
        trial = data.get("trial", data)
        doc = trial["strategy"]
        return cls(
            id=int(trial["id"]),
            claim_token=str(data["claim_token"]),
            attempt=int(data["attempt"]),
            model=parse_as(ModelSpec, data["model"]),
            cluster=parse_as(ClusterSpec, data["cluster"]),
            strategy=parse_as(Strategy, doc) if document_kind(doc) == "strategy" else dict(doc),
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
        r = self._http.post(
            "/workers/claim", json={"pool": pool, "clusters": clusters, "worker": self.worker_name}
        )
        if r.status_code == 204:
            return None
        _check(r, "claim")
        body = r.json()
        if not body:
            return None
        return ClaimedTrial.from_json(body)

    def heartbeat(self, trial: ClaimedTrial) -> HeartbeatReply:
        r = self._http.post(
            f"/trials/{trial.id}/heartbeat",
            json={"claim_token": trial.claim_token, "attempt": trial.attempt, "worker": self.worker_name},
        )
        if r.status_code in (404, 409):
            return HeartbeatReply(cancel=False, lost=True)
        _check(r, "heartbeat")
        body = r.json()
        return HeartbeatReply(cancel=bool(body.get("stop", False)), lost=not body.get("accepted", True))

    def report(self, trial: ClaimedTrial, measurement: Measurement) -> bool:
        """Report a measurement; False when it was not recorded (a duplicate, a stale claim, cancelled)."""
        r = self._http.post(
            f"/trials/{trial.id}/report",
            json={
                "claim_token": trial.claim_token,
                "attempt": trial.attempt,
                "worker": self.worker_name,
                "measurement": measurement.model_dump(mode="json"),
            },
        )
        if r.status_code in (404, 409):
            return False
        _check(r, "report")
        return bool(r.json().get("recorded", True))


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
