"""The seam between the API and the search loop: what the API tells the loop after it stored something.

The database is the source of truth, so every hook is a *notification after commit*: the state it
announces is already stored, and a loop that polls the database (pending searches, queued trials,
pending retrain requests) finds the same work without it. Hooks make the loop react at once
instead of at its next poll. A hook must be quick and thread-safe (it runs in the request's
worker thread) and must not raise; an exception is logged and the request still succeeds.
"""

from __future__ import annotations

from typing import Protocol

from service.domain import Candidate, RetrainRequest, Search, Trial


class Orchestrator(Protocol):
    """What the search loop implements to hear about API-side changes."""

    def search_created(self, search: Search) -> None:
        """A search was stored in state 'pending'; the loop starts round 1 (and the baselines)."""

    def search_cancelled(self, search: Search) -> None:
        """A search was cancelled: its queued trials are cancelled, running ones flagged to stop."""

    def candidate_decided(self, candidate: Candidate, trial: Trial | None) -> None:
        """A candidate was approved (``trial`` is its newly queued trial) or rejected (None)."""

    def trial_finished(self, trial: Trial) -> None:
        """A worker's report was recorded; the trial is succeeded, failed or cancelled."""

    def retrain_requested(self, request: RetrainRequest) -> None:
        """Someone asked to retrain a domain's simulator; the request is stored as 'pending'."""


class StoreOnly:
    """The orchestrator of an API running without an in-process loop (e.g. an API-only replica).

    The API has stored everything the loop needs, so there is nothing to forward: a loop in
    another process polls the database and picks the work up.
    """

    def search_created(self, search: Search) -> None:
        return None

    def search_cancelled(self, search: Search) -> None:
        return None

    def candidate_decided(self, candidate: Candidate, trial: Trial | None) -> None:
        return None

    def trial_finished(self, trial: Trial) -> None:
        return None

    def retrain_requested(self, request: RetrainRequest) -> None:
        return None
