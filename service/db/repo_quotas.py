"""Data access for per-user quotas: how much a user currently holds (active searches, queued trials),
and the one check every path that creates work calls (the API, the dashboard, the search loop)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service import domain as d
from service.db.models import SearchRow, TrialRow

ACTIVE_STATES = ("pending", "running", "awaiting_approval")


def user_usage(session: Session, *, owner_id: int) -> d.Usage:
    """The owner's searches that are not finished and their trials still waiting in the queue."""
    with session.begin():
        active = session.scalar(
            select(func.count())
            .select_from(SearchRow)
            .where(SearchRow.owner_id == owner_id, SearchRow.state.in_(ACTIVE_STATES))
        )
        queued = session.scalar(
            select(func.count())
            .select_from(TrialRow)
            .join(SearchRow, SearchRow.id == TrialRow.search_id)
            .where(SearchRow.owner_id == owner_id, TrialRow.state == "queued")
        )
    return d.Usage(active_searches=int(active or 0), queued_trials=int(queued or 0))


def check_can_create_search(
    session: Session, *, owner_id: int, max_active_searches: int, max_queued_trials: int
) -> None:
    """QuotaExceeded naming the limit (its setting) if the owner may not create another search now.

    Every path that creates a search calls this first (``POST /searches``, the dashboard's form).
    Two requests racing past the check can exceed a quota by one each; the quota bounds a careless
    pipeline, it is not an accounting ledger.
    """
    usage = user_usage(session, owner_id=owner_id)
    if usage.active_searches >= max_active_searches:
        raise d.QuotaExceeded(
            f"you have {usage.active_searches} active searches, the limit is {max_active_searches}"
            " (max_active_searches); wait for one to finish or cancel one"
        )
    if usage.queued_trials >= max_queued_trials:
        raise d.QuotaExceeded(
            f"your searches have {usage.queued_trials} queued trials, the limit is {max_queued_trials}"
            " (max_queued_trials); wait for workers to take them"
        )


def queue_room(session: Session, *, owner_id: int, max_queued_trials: int) -> int:
    """How many more trials the owner's searches may queue now (0 or more): the search loop asks
    before it plans a round, and waits while the round's trials would pass ``max_queued_trials``."""
    return max(0, max_queued_trials - user_usage(session, owner_id=owner_id).queued_trials)
