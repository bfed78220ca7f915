"""Data access for workers: registration and heartbeat, who is live per pool, searches left waiting.

How liveness is known (the choice, issue 21): a heartbeat *row* in the database, not Celery worker
events or a Redis key. Workers already talk to the API and nothing else (no database credentials,
the broker is optional: a poll-only worker never touches it), and the database is the source of
truth for trials; so the API stamps ``workers.last_seen_at`` on every claim poll (an idle worker
polls every few seconds) and on every trial heartbeat (a busy one beats every ``heartbeat_s``).
That works the same on the embedded SQLite deployment and on PostgreSQL, and sees poll-only
workers, which Celery's ``inspect ping`` would miss.

A worker is *live* when it was seen within ``live_s`` seconds; the service passes its
``heartbeat_timeout_s``: a worker silent for as long as a trial may go without a heartbeat is as
dead as that trial's claim (the sweep requeues such a trial under the existing rules). A worker's
current trial is not stored twice: it is the running trial whose ``claimed_by`` is its name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from service import domain as d
from service.db.convert import aware, maybe_aware
from service.db.models import TokenRow, TrialRow, UserRow, WorkerRow, utcnow
from service.db.repo_searches import load_search
from service.db.repo_trials import runnable_cluster_ids


def touch_worker(
    session: Session, *, name: str, user_id: int | None, clusters: Sequence[str], pool: str = ""
) -> None:
    """Record that worker ``name`` is alive, in ``pool``, able to run ``clusters`` (insert or update).

    A worker name belongs to the token's user that first used it (issue 44): another user's token
    claiming under it is a Conflict, while that user holds a token that is not revoked, so no token
    can pose as another's worker (``embedded-worker`` included) or take its trials' heartbeats.
    """
    with session.begin():
        row = session.scalars(select(WorkerRow).where(WorkerRow.name == name)).one_or_none()
        if row is None:
            session.add(WorkerRow(name=name, user_id=user_id, clusters=list(clusters), pool=pool))
            return
        if row.user_id is not None and row.user_id != user_id and _holds_a_live_token(session, row.user_id):
            raise d.Conflict(f"worker name {name!r} belongs to another token; pick another name")
        if list(row.clusters) != list(clusters):
            row.clusters = list(clusters)
        if pool and row.pool != pool:
            row.pool = pool
        row.user_id = user_id
        row.last_seen_at = utcnow()


def list_workers(
    session: Session, *, live_s: float, live_only: bool = False, now: datetime | None = None
) -> list[d.WorkerInfo]:
    """Every worker seen (or only the live ones), most recently seen first, with its current trial."""
    now = now or utcnow()
    with session.begin():
        q = select(WorkerRow).order_by(WorkerRow.last_seen_at.desc(), WorkerRow.id.desc())
        if live_only:
            q = q.where(WorkerRow.last_seen_at >= now - timedelta(seconds=live_s))
        rows = session.scalars(q).all()
        holding: dict[str, int] = {
            str(name): int(tid)
            for name, tid in session.execute(
                select(TrialRow.claimed_by, TrialRow.id).where(
                    TrialRow.state == "running", TrialRow.claimed_by.is_not(None)
                )
            )
        }
        return [
            d.WorkerInfo(
                id=r.id,
                name=r.name,
                user_id=r.user_id,
                clusters=tuple(str(c) for c in r.clusters),
                last_seen_at=aware(r.last_seen_at),
                pool=r.pool,
                live=(now - aware(r.last_seen_at)).total_seconds() <= live_s,
                current_trial_id=holding.get(r.name),
            )
            for r in rows
        ]


def waiting_on_workers(
    session: Session,
    *,
    search_id: int,
    live_s: float,
    owner_id: int | None = None,
    now: datetime | None = None,
) -> str | None:
    """Why the search's trials are not moving for want of a worker, in one line; None when they are.

    - Queued trials on a cluster that no live worker advertises, once they have waited ``live_s``
      seconds *with no such worker seen*: the wait counts from the later of the oldest queued
      trial's creation and the last time a worker for that cluster was seen (a worker that just
      died, or whose token was revoked, makes its pool's trials stall ``live_s`` seconds later).
    - Running trials whose heartbeat is older than ``live_s``: their worker is gone; the sweep
      requeues them (or fails them after the maximum attempts).
    """
    now = now or utcnow()
    with session.begin():
        search = load_search(session, search_id, owner_id)
        trials = session.execute(
            select(
                TrialRow.id,
                TrialRow.state,
                TrialRow.cluster_name,
                TrialRow.created_at,
                TrialRow.claimed_by,
                TrialRow.heartbeat_at,
            ).where(TrialRow.search_id == search_id, TrialRow.state.in_(("queued", "running")))
        ).all()
        if not trials:
            return None
        seen = session.execute(
            select(
                WorkerRow.name, WorkerRow.pool, WorkerRow.clusters, WorkerRow.last_seen_at, WorkerRow.user_id
            )
        ).all()
        # Only workers whose claims would reach this search count (trials go by spec id, not name:
        # service.db.repo_trials.claim_trial): the names they advertise resolve, for their token's
        # user, to the search's cluster, and a person's own worker serves only their searches.
        ids = {w.user_id for w in seen if w.user_id is not None}
        people = set(session.scalars(select(UserRow.id).where(UserRow.id.in_(ids), UserRow.role == "user")))
        workers = [
            w
            for w in seen
            if (w.user_id not in people or w.user_id == search.owner_id)
            and search.cluster_spec_id
            in runnable_cluster_ids(session, names=[str(c) for c in w.clusters], user_id=w.user_id)
        ]
    lines: list[str] = []
    queued: dict[str, list[datetime]] = defaultdict(list)
    for t in trials:
        if t.state == "queued":
            queued[t.cluster_name].append(aware(t.created_at))
            continue
        beat = maybe_aware(t.heartbeat_at)
        silent = (now - beat).total_seconds() if beat is not None else None
        if silent is not None and silent > live_s:
            lines.append(
                f"trial {t.id} is held by worker {t.claimed_by}, silent for {silent:.0f} s:"
                " its worker is gone; the sweep requeues it"
            )
    for cluster, created in sorted(queued.items()):
        able = [w for w in workers if cluster in w.clusters]
        last = max(able, key=lambda w: aware(w.last_seen_at), default=None)
        last_seen = aware(last.last_seen_at) if last is not None else None
        if last_seen is not None and (now - last_seen).total_seconds() <= live_s:
            continue  # a live worker can run them: they are just waiting their turn
        since = max(min(created), last_seen) if last_seen is not None else min(created)
        waited = (now - since).total_seconds()
        if waited < live_s:
            continue
        who = (
            f"last seen: worker {last.name} (pool {last.pool or '?'}) {(now - last_seen).total_seconds():.0f} s ago"
            if last is not None and last_seen is not None
            else "no worker has ever advertised it"
        )
        if last is None and (others := sorted(w.name for w in seen if cluster in w.clusters)):
            who = (
                f"worker(s) {', '.join(others)} advertise {cluster} but their tokens resolve it to"
                " another cluster of that name: a cluster you uploaded is run by a worker with your token"
            )
        lines.append(
            f"{len(created)} trial(s) queued on cluster {cluster} for {waited:.0f} s"
            f" with no live worker for it ({who})"
        )
    return "; ".join(lines) or None


def _holds_a_live_token(session: Session, user_id: int) -> bool:
    live = select(TokenRow.id).where(TokenRow.user_id == user_id, TokenRow.revoked_at.is_(None)).limit(1)
    return session.scalars(live).first() is not None
