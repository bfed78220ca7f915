"""A search's progress in one read: trial counts, the best measured candidate, speed-ups over baselines."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from service import domain as d
from service.db import convert
from service.db.models import MeasurementRow, TrialRow
from service.db.repo_searches import load_search
from simulator.spec import Strategy
from simulator.spec.io import parse_as

if TYPE_CHECKING:
    from search.speedup import FamilyResult, SpaceReport


def search_status(session: Session, *, search_id: int, owner_id: int | None = None) -> d.SearchStatus:
    """Progress of a search as of now.

    The best trial is the succeeded candidate trial with the smallest median iteration time (for
    the 'cost' objective the order is the same: one search runs on one cluster, whose price per
    second is fixed). Baselines are grouped into families whose tuned member is the fastest
    measured one (``search.speedup``); ``speedups`` maps each family to its tuned median over the
    best candidate's median *of the same space* (lossless vs lossless, lossy vs lossy); > 1 means
    the search's best beat it. ``reports`` adds the 95 % bootstrap interval of each ratio.
    """
    with session.begin():
        search = load_search(session, search_id, owner_id)
        rows = session.execute(
            select(
                TrialRow.id,
                TrialRow.state,
                TrialRow.baseline,
                TrialRow.candidate_id,
                TrialRow.strategy,
                MeasurementRow.median_time,
                MeasurementRow.iteration_times,
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
        # Baseline families and speed-ups compare AutoSync strategies; other plan kinds report theirs
        # through their own results (service.plans).
        families, reports = _honest(rows) if search.plan_kind == "sync" else ((), ())
        # Per baseline family: its tuned (fastest measured) member's median / the best candidate of
        # the same space (lossless vs lossless, lossy vs lossy; < 1: the search did not beat it).
        speedups = {r.family: r.ratio for rep in reports for r in rep.ratios if rep.winner is not None}
        if search.plan_kind in ("pipeline", "hybrid") and best is not None:
            # a pipeline (1F1B) or hybrid (even shares) baseline's median / the best candidate's
            speedups = {b.name: b.median_time / best.median_time for b in baselines if b.median_time}
        return d.SearchStatus(
            search=convert.search(search),
            trials_by_state=by_state,
            candidate_trials_done=done,
            best_trial_id=best.id if best else None,
            best_candidate_id=best.candidate_id if best else None,
            best_time=best.median_time if best else None,
            baselines=baselines,
            speedups=speedups,
            families=families,
            reports=reports,
        )


def _honest(rows: Sequence[Row[Any]]) -> tuple[tuple[FamilyResult, ...], tuple[SpaceReport, ...]]:
    """Baseline families and per-space reports (``search.speedup``) from the trials' measurements."""
    from search.space import space_of
    from search.speedup import Measured, family_results, space_reports

    def measured(r: Row[Any], label: str) -> Measured | None:
        if r.state != "succeeded" or not r.iteration_times:
            return None
        return Measured(
            label, space_of(parse_as(Strategy, r.strategy)), tuple(float(t) for t in r.iteration_times)
        )

    base = [m for r in rows if r.baseline is not None and (m := measured(r, str(r.baseline)))]
    failed = [str(r.baseline) for r in rows if r.baseline is not None and r.state in ("failed", "cancelled")]
    cands = [m for r in rows if r.baseline is None and (m := measured(r, f"trial:{r.id}"))]
    families = family_results(base, failed)
    return families, space_reports(cands, families)
