"""Data access for trials: enqueue, claim, heartbeat, report exactly once, requeue stale ones.

The database, not the queue, is the source of truth for a trial (docs/service.md). Contract:
- ``claim_trial`` is atomic: a queued trial goes to exactly one worker, also under concurrent
  claims (PostgreSQL: ``SELECT ... FOR UPDATE SKIP LOCKED`` then a conditional UPDATE; SQLite: the
  conditional ``UPDATE ... WHERE state = 'queued'`` alone, whose row count says who won). Each
  claim increments ``attempt`` and issues a fresh random ``claim_token``. It routes by the search's
  cluster spec id, never by name alone (``runnable_cluster_ids``; docs/service.md#trial-routing).
- heartbeats and reports must carry the current (attempt, claim_token); anything else is stale.
- ``report_trial`` records at most one measurement per trial, ever: the conditional UPDATE
  ``WHERE state = 'running' AND attempt = :attempt`` lets one report through, and the UNIQUE
  ``measurements.trial_id`` backs it up. A duplicate or stale report is a no-op returning the trial
  as it stands (``recorded=False``).
- a finished trial (succeeded, failed, cancelled) is never modified.
- ``requeue_stale_trials`` puts running trials whose heartbeat is older than the timeout back in
  the queue (a later claim makes it attempt + 1), fails them after ``max_attempts`` claims, and
  cancels them if their search was cancelled.
- ``release_trial`` is a worker handing its claimed trial back on a normal stop (drain): the trial
  is requeued at once with the attempt *not* counted (``attempt - 1``; a fresh claim token on the
  next claim still refuses the old one), or ends 'cancelled' if its search was cancelled meanwhile.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Update, select, update
from sqlalchemy.orm import Session

from service import domain as d
from service.db import convert
from service.db.engine import affected
from service.db.models import (
    GangSlotRow,
    MeasurementRow,
    PoolSpecRow,
    RuntimeRecordRow,
    SearchRow,
    SpecRow,
    TrialRow,
    WorkerRow,
    utcnow,
)
from service.db.paging import keyset
from service.db.repo_searches import load_search, new_trial, open_search_guard
from simulator.spec import domain_name
from simulator.spec.measurement import Measurement, measured_on


def _trial(session: Session, row: TrialRow) -> d.Trial:
    meas = session.scalars(select(MeasurementRow).where(MeasurementRow.trial_id == row.id)).one_or_none()
    return convert.trial(row, meas)


def enqueue_trial(
    session: Session,
    *,
    search_id: int,
    strategy: dict[str, object],
    baseline: str | None = None,
    candidate_id: int | None = None,
    round_index: int | None = None,
    predicted_time: float | None = None,
) -> d.Trial:
    """Queue a trial of a baseline (by name) or a candidate; idempotent per baseline/candidate.

    Conflict if the search is final. Exactly one of ``baseline`` and ``candidate_id`` is given.
    """
    if (baseline is None) == (candidate_id is None):
        raise ValueError("give exactly one of baseline and candidate_id")
    with session.begin():
        search = load_search(session, search_id, None, lock=True)
        if search.state in d.SEARCH_FINAL:
            raise d.Conflict(f"search {search_id} is already {search.state}")
        q = select(TrialRow).where(TrialRow.search_id == search_id)
        q = q.where(TrialRow.baseline == baseline if baseline else TrialRow.candidate_id == candidate_id)
        row = session.scalars(q).one_or_none()
        if row is None:
            row = new_trial(
                search,
                strategy=strategy,
                candidate_id=candidate_id,
                baseline=baseline,
                round_index=round_index,
                predicted_time=predicted_time,
            )
            session.add(row)
            session.flush()
            open_search_guard(session, search_id)  # cancelled meanwhile: roll the insert back
        return _trial(session, row)


def get_trial(session: Session, *, trial_id: int, owner_id: int | None = None) -> d.Trial:
    """One trial with its measurement; NotFound if absent or its search is not the owner's."""
    with session.begin():
        row = session.get(TrialRow, trial_id)
        if row is None:
            raise d.NotFound(f"no trial {trial_id}")
        load_search(session, row.search_id, owner_id)
        return _trial(session, row)


def list_trials(
    session: Session,
    *,
    search_id: int,
    owner_id: int | None = None,
    states: Sequence[d.TrialState] | None = None,
    round_index: int | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[d.Trial]:
    """Trials of a search (baselines have no round), oldest first, with their measurements."""
    with session.begin():
        load_search(session, search_id, owner_id)
        q = select(TrialRow, MeasurementRow).outerjoin(MeasurementRow, MeasurementRow.trial_id == TrialRow.id)
        q = q.where(TrialRow.search_id == search_id)
        if states is not None:
            q = q.where(TrialRow.state.in_(list(states)))
        if round_index is not None:
            q = q.where(TrialRow.round_index == round_index)
        q = keyset(q.order_by(TrialRow.id), TrialRow.id, after=after, limit=limit)
        return [convert.trial(t, m) for t, m in session.execute(q)]


def runnable_cluster_ids(session: Session, *, names: Sequence[str], user_id: int | None) -> list[int]:
    """The cluster spec ids a worker advertising ``names`` may run (inside the caller's transaction).

    Each name resolves as a search resolves it for its owner (docs/service.md#trial-routing):
    ``user_id``'s own upload of that name, else the zoo's (every stored copy of the zoo entry).
    ``user_id=None`` (tests, in-process callers) is unscoped: every spec of that name. Specs tied to
    an agent pool (``pool_specs``) are never resolved: their trials go to that pool's agents only.
    """
    q = select(SpecRow.id, SpecRow.name, SpecRow.owner_id, SpecRow.origin).where(
        SpecRow.kind == "cluster",
        SpecRow.name.in_(list(names)),
        SpecRow.id.not_in(select(PoolSpecRow.spec_id)),
    )
    if user_id is None:
        return [r.id for r in session.execute(q)]
    q = q.where((SpecRow.owner_id == user_id) | (SpecRow.origin == "zoo"))
    rows = session.execute(q).all()
    own = {r.name for r in rows if r.owner_id == user_id and r.origin == "upload"}
    return [r.id for r in rows if (r.origin == "upload") == (r.name in own)]


def claim_trial(
    session: Session,
    *,
    worker: str,
    clusters: Sequence[str],
    trial_id: int | None = None,
    user_id: int | None = None,
    own_searches_only: bool = False,
) -> d.TrialClaim | None:
    """Give the oldest queued trial on one of ``clusters`` (or exactly ``trial_id``) to ``worker``.

    Trials are routed by cluster spec id, not name: ``clusters`` resolve to spec ids with
    `runnable_cluster_ids` for the claiming token's user ``user_id``, and a trial is claimable when
    its search's ``cluster_spec_id`` is one of them. ``own_searches_only``: only ``user_id``'s own
    searches (a person's token running their own worker never measures someone else's search).
    Returns None when nothing claimable is queued. Safe under concurrent callers (see module doc).
    """
    if not clusters:
        return None
    spec_ids: list[int] | None = None
    for _ in range(8):  # each pass either wins a row or sees the queue change under it
        with session.begin():
            if spec_ids is None:  # resolved once, in the first pass's transaction (no extra round trip)
                spec_ids = runnable_cluster_ids(session, names=clusters, user_id=user_id)
            if not spec_ids:
                return None
            searches = select(SearchRow.id).where(SearchRow.cluster_spec_id.in_(spec_ids))
            if own_searches_only:
                searches = searches.where(SearchRow.owner_id == user_id)
            # The name filter uses the (state, cluster_name) index; the search filter is the routing.
            # A subquery, not a join: FOR UPDATE must lock the trial row only, never its search.
            q = select(TrialRow.id).where(
                TrialRow.state == "queued",
                TrialRow.cluster_name.in_(list(clusters)),
                TrialRow.search_id.in_(searches),
            )
            if trial_id is not None:
                q = q.where(TrialRow.id == trial_id)
            picked = session.scalars(
                q.order_by(TrialRow.id).limit(1).with_for_update(skip_locked=True)
            ).one_or_none()
            if picked is None:
                return None
            token = secrets.token_hex(16)
            now = utcnow()
            won = session.execute(
                update(TrialRow)
                .where(TrialRow.id == picked, TrialRow.state == "queued")
                .values(
                    state="running",
                    attempt=TrialRow.attempt + 1,
                    claim_token=token,
                    claimed_by=worker,
                    heartbeat_at=now,
                    started_at=now,
                )
            )
            if affected(won) != 1:
                continue
            row = session.get_one(TrialRow, picked, populate_existing=True)
            search = session.get_one(SearchRow, row.search_id)
            model = session.get_one(SpecRow, search.model_spec_id)
            cluster = session.get_one(SpecRow, search.cluster_spec_id)
            return d.TrialClaim(
                trial=_trial(session, row),
                attempt=row.attempt,
                claim_token=token,
                model=dict(model.body),
                cluster=dict(cluster.body),
                model_factory=search.model_factory,
            )
    return None


def heartbeat(session: Session, *, trial_id: int, attempt: int, claim_token: str) -> d.HeartbeatAck:
    """Refresh a running trial's heartbeat.

    A stale claim (another attempt, wrong token, trial no longer running) is not refreshed and
    answers ``accepted=False`` (the trial is no longer this worker's: abandon it, do not report);
    a trial whose search was cancelled answers ``accepted=True, stop=True`` (stop it).
    """
    with session.begin():
        done = session.execute(_held(trial_id, attempt, claim_token).values(heartbeat_at=utcnow()))
        if affected(done) != 1:
            if session.get(TrialRow, trial_id) is None:
                raise d.NotFound(f"no trial {trial_id}")
            return d.HeartbeatAck(accepted=False, stop=False)
        stop, holder = session.execute(
            select(TrialRow.stop_requested, TrialRow.claimed_by).where(TrialRow.id == trial_id)
        ).one()
        # A busy worker's trial heartbeat is its liveness too (service.db.repo_workers).
        session.execute(update(WorkerRow).where(WorkerRow.name == holder).values(last_seen_at=utcnow()))
        return d.HeartbeatAck(accepted=True, stop=bool(stop))


def report_trial(
    session: Session, *, trial_id: int, attempt: int, claim_token: str, measurement: Measurement
) -> d.ReportOutcome:
    """Record the one measurement of a trial and finish it; duplicates and stale reports are no-ops.

    The trial ends 'succeeded' (measurement ok), 'failed' (``measurement.failure`` or no times) or
    'cancelled' (its search was cancelled while it ran; the measurement is kept). A succeeded
    trial's runtime also goes into ``runtime_records`` for retraining, in the same unit of work.
    """
    with session.begin():
        row = session.get(TrialRow, trial_id)
        if row is None:
            raise d.NotFound(f"no trial {trial_id}")
        final = "cancelled" if row.stop_requested else "succeeded" if measurement.ok else "failed"
        reason = None if measurement.ok else (measurement.failure or "no iteration times measured")
        if final == "cancelled":
            reason = "search cancelled" + (f"; {reason}" if reason else "")
        now = utcnow()
        won = session.execute(
            _held(trial_id, attempt, claim_token).values(
                state=final, failure_reason=reason, finished_at=now, heartbeat_at=now
            )
        )
        if affected(won) != 1:
            session.refresh(row)
            return d.ReportOutcome(trial=_trial(session, row), recorded=False)
        median = measurement.median if measurement.ok else None
        session.add(
            MeasurementRow(
                trial_id=trial_id,
                attempt=attempt,
                worker=row.claimed_by,
                iteration_times=list(measurement.iteration_times),
                median_time=median,
                failure=measurement.failure,
                body=measurement.model_dump(mode="json"),
            )
        )
        search = session.get_one(SearchRow, row.search_id)
        # Runtime records train the simulators of AutoSync strategies; other plan kinds' documents
        # are not strategies and stay with their trials.
        if final == "succeeded" and median is not None and search.plan_kind == "sync":
            session.add(
                RuntimeRecordRow(
                    domain=domain_name(search.model_name, search.cluster_name),
                    model_name=search.model_name,
                    cluster_name=search.cluster_name,
                    strategy=row.strategy,
                    iteration_times=list(measurement.iteration_times),
                    median_time=median,
                    source="trial",
                    search_id=search.id,
                    trial_id=trial_id,
                    user_id=search.owner_id,
                    measured_on=_measured_on(measurement),
                )
            )
        session.flush()
        session.refresh(row)
        return d.ReportOutcome(trial=_trial(session, row), recorded=True)


def _held(trial_id: int, attempt: int, claim_token: str) -> Update:
    """An update of the trial only while this claim still holds it: running, this attempt, this
    token (a stale worker's heartbeat, report or release then changes no row)."""
    return update(TrialRow).where(
        TrialRow.id == trial_id,
        TrialRow.state == "running",
        TrialRow.attempt == attempt,
        TrialRow.claim_token == claim_token,
    )


def _measured_on(measurement: Measurement) -> dict[str, Any] | None:
    """Where it was measured (``simulator.spec.measurement.measured_on``), as stored."""
    site = measured_on(measurement.environment)
    return None if site is None else site.model_dump(mode="json")


def release_trial(
    session: Session, *, trial_id: int, attempt: int, claim_token: str, reason: str = ""
) -> tuple[bool, d.Trial]:
    """Hand a claimed trial back (the worker stops normally): (released, the trial after it).

    Only the current claim (running, this attempt and token) is released; anything else changes
    nothing (False). A released trial is queued again with its attempt not counted, so a drained
    worker never spends one of the trial's ``max_attempts``; if its search was cancelled it ends
    'cancelled'. A gang attempt (slots recorded under this attempt number) keeps its count, so the
    next claim's slots get a fresh attempt number.
    """
    with session.begin():
        row = session.get(TrialRow, trial_id)
        if row is None:
            raise d.NotFound(f"no trial {trial_id}")
        values: dict[str, object]
        if row.stop_requested:
            why = "search cancelled" + (f"; released: {reason}" if reason else "")
            values = {"state": "cancelled", "failure_reason": why, "finished_at": utcnow()}
        else:
            gang = session.execute(
                select(GangSlotRow.id)
                .where(GangSlotRow.trial_id == trial_id, GangSlotRow.attempt == attempt)
                .limit(1)
            ).first()
            values = {
                "state": "queued",
                "attempt": attempt if gang is not None else max(attempt - 1, 0),
                "claim_token": None,
                "claimed_by": None,
                "heartbeat_at": None,
            }
        done = session.execute(_held(trial_id, attempt, claim_token).values(**values))
        session.refresh(row)
        return affected(done) == 1, _trial(session, row)


def requeue_stale_trials(
    session: Session, *, timeout_s: float, max_attempts: int = 3, now: datetime | None = None
) -> list[d.Trial]:
    """Requeue running trials whose heartbeat is older than ``timeout_s``; returns those changed.

    A trial already claimed ``max_attempts`` times fails instead ("heartbeat lost"); one whose
    search was cancelled ends 'cancelled'. Each row changes through a conditional UPDATE, so a
    report racing the sweep either lands first (the sweep skips the trial) or finds it requeued.
    """
    now = now or utcnow()
    cutoff = now - timedelta(seconds=timeout_s)
    changed: list[d.Trial] = []
    with session.begin():
        stale = session.scalars(
            select(TrialRow)
            .where(TrialRow.state == "running", TrialRow.heartbeat_at < cutoff)
            .order_by(TrialRow.id)
            .with_for_update(skip_locked=True)
        ).all()
        for row in stale:
            values: dict[str, object]
            if row.stop_requested:
                values = {"state": "cancelled", "failure_reason": "search cancelled", "finished_at": now}
            elif row.attempt >= max_attempts:
                values = {
                    "state": "failed",
                    "failure_reason": f"heartbeat lost on {row.attempt} attempts (last: {row.claimed_by})",
                    "finished_at": now,
                }
            else:
                values = {"state": "queued", "claim_token": None, "claimed_by": None, "heartbeat_at": None}
            done = session.execute(
                update(TrialRow)
                .where(TrialRow.id == row.id, TrialRow.state == "running", TrialRow.attempt == row.attempt)
                .values(**values)
            )
            if affected(done) == 1:
                session.refresh(row)
                changed.append(_trial(session, row))
    return changed
