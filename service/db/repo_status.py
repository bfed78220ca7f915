"""A search's progress in one read: trial counts, the best measured candidate, speed-ups over baselines."""

from __future__ import annotations

from collections import Counter
from typing import cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from service import domain as d
from service.db import convert
from service.db.models import MeasurementRow, TrialRow
from service.db.repo_searches import load_search


def search_status(session: Session, *, search_id: int, owner_id: int | None = None) -> d.SearchStatus:
    """Progress of a search as of now.

    The best trial is the succeeded candidate trial with the smallest median iteration time (for
    the 'cost' objective the order is the same: one search runs on one cluster, whose price per
    second is fixed). Speed-up over a baseline = baseline median / best median, for each baseline
    that succeeded; > 1 means the search's best beat it.
    """
    with session.begin():
        search = load_search(session, search_id, owner_id)
        rows = session.execute(
            select(
                TrialRow.id,
                TrialRow.state,
                TrialRow.baseline,
                TrialRow.candidate_id,
                MeasurementRow.median_time,
            )
            .outerjoin(MeasurementRow, MeasurementRow.trial_id == TrialRow.id)
            .where(TrialRow.search_id == search_id)
            .order_by(TrialRow.id)
        ).all()
        counts = Counter(r.state for r in rows)
        by_state: dict[str, int] = {s: counts.get(s, 0) for s in d.TRIAL_STATES}
        done = sum(1 for r in rows if r.baseline is None and r.state in d.TRIAL_FINAL)
        best = min(
            (r for r in rows if r.baseline is None and r.state == "succeeded" and r.median_time is not None),
            key=lambda r: (r.median_time, r.id),
            default=None,
        )
        baselines = tuple(
            d.BaselineResult(
                name=str(r.baseline),
                trial_id=r.id,
                state=cast(d.TrialState, r.state),
                median_time=r.median_time if r.state == "succeeded" else None,
            )
            for r in rows
            if r.baseline is not None
        )
        speedups: dict[str, float] = {}
        if best is not None and best.median_time:
            for b in baselines:
                if b.median_time is not None:
                    speedups[b.name] = b.median_time / best.median_time
        return d.SearchStatus(
            search=convert.search(search),
            trials_by_state=by_state,
            candidate_trials_done=done,
            best_trial_id=best.id if best else None,
            best_candidate_id=best.candidate_id if best else None,
            best_time=best.median_time if best else None,
            baselines=baselines,
            speedups=speedups,
        )
