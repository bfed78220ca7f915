"""Data access for per-user quotas: how much a user currently holds (active searches, queued trials)."""

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
