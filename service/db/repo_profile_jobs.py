"""Data access for profile jobs (issue 15): queue, claim by a GPU-pool worker, finish with a profile.

Contract: a job is claimed by one worker at a time; a claim older than ``PROFILE_JOB_TIMEOUT_S``
(a worker that died mid-job) may be claimed again. Finishing needs the claiming worker's name and a
running job, so a late result from a superseded claim is refused (Conflict) and a job stores at
most one profile. A finished job is never modified. A worker that stops normally (a drain) hands its
running job back (``release_profile_job``): queued again at once, for any worker to claim.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from service import domain as d
from service.db.convert import aware, maybe_aware
from service.db.models import ProfileJobRow, utcnow
from service.db.repo_profiles import add_profile
from simulator.spec import ModelSpec
from simulator.spec.io import parse_as
from simulator.spec.profile import Profile

#: Seconds after which a running job's claim is considered lost and the job may be claimed again.
PROFILE_JOB_TIMEOUT_S = 3600.0


def _record(row: ProfileJobRow) -> d.ProfileJobRecord:
    return d.ProfileJobRecord(
        id=row.id,
        model=row.model,
        spec=parse_as(ModelSpec, row.spec),
        device=row.device,
        dtype=row.dtype,
        batch=row.batch,
        repeats=row.repeats,
        state=row.state,
        worker=row.worker,
        profile_id=row.profile_id,
        error=row.error,
        owner_id=row.owner_id,
        created_at=aware(row.created_at),
        finished_at=maybe_aware(row.finished_at),
    )


def queue_profile_job(
    session: Session,
    *,
    spec: ModelSpec,
    batch: int,
    dtype: str,
    device: str | None,
    repeats: int,
    owner_id: int | None,
) -> d.ProfileJobRecord:
    """Queue a job to profile ``spec`` at ``batch`` in ``dtype`` (keyed by ``device`` if given)."""
    with session.begin():
        row = ProfileJobRow(
            model=spec.name,
            spec=spec.model_dump(mode="json"),
            device=device,
            dtype=dtype,
            batch=batch,
            repeats=repeats,
            owner_id=owner_id,
        )
        session.add(row)
        session.flush()
        return _record(row)


def get_profile_job(session: Session, *, job_id: int, viewer_id: int | None) -> d.ProfileJobRecord:
    """A job by id, if ``viewer_id`` queued it (None: an admin, any job); NotFound otherwise."""
    with session.begin():
        row = session.get(ProfileJobRow, job_id)
        if row is None or (viewer_id is not None and row.owner_id != viewer_id):
            raise d.NotFound(f"no profile job {job_id}")
        return _record(row)


def claim_profile_job(session: Session, *, worker: str) -> d.ProfileJobRecord | None:
    """The oldest queued job (or one whose claim went stale), now running for ``worker``; None if none."""
    stale = utcnow() - timedelta(seconds=PROFILE_JOB_TIMEOUT_S)
    with session.begin():
        q = (
            select(ProfileJobRow)
            .where(
                or_(
                    ProfileJobRow.state == "queued",
                    (ProfileJobRow.state == "running") & (ProfileJobRow.claimed_at < stale),
                )
            )
            .order_by(ProfileJobRow.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        row = session.scalars(q).first()
        if row is None:
            return None
        row.state, row.worker, row.claimed_at = "running", worker, utcnow()
        session.flush()
        return _record(row)


def finish_profile_job(
    session: Session,
    *,
    job_id: int,
    worker: str,
    profile: Profile | None,
    error: str | None,
) -> d.ProfileJobRecord:
    """Finish a running job of ``worker``: store ``profile`` (done) or record ``error`` (failed).

    The profile belongs to whoever queued the job (`service.db.repo_profiles`: theirs to use, or
    zoo-wide when an admin queued it), never to the worker that measured it.

    Conflict when the job is not running for this worker, or the profile is not of the job's
    model, dtype and batch; NotFound when there is no such job.
    """
    with session.begin():
        row = session.get(ProfileJobRow, job_id, with_for_update=True)
        if row is None:
            raise d.NotFound(f"no profile job {job_id}")
        if row.state != "running" or row.worker != worker:
            raise d.Conflict(f"profile job {job_id} is not running for worker {worker!r} (state {row.state})")
        if profile is not None:
            want = (row.model, row.dtype, row.batch)
            got = (profile.model, profile.dtype, profile.batch)
            if got != want:
                raise d.Conflict(f"profile job {job_id}: the profile is for {got}, the job for {want}")
            prof = add_profile(session, profile=profile, owner_id=row.owner_id)
            row.profile_id, row.state = prof.id, "done"
        else:
            row.state, row.error = "failed", error or "failed without a reason"
        row.finished_at = utcnow()
        session.flush()
        return _record(row)


def release_profile_job(session: Session, *, job_id: int, worker: str) -> tuple[bool, d.ProfileJobRecord]:
    """Hand a job ``worker`` is running back (the worker is stopping): queued again at once, with no
    trace of the claim. (False, the job) when it is not running for ``worker`` (finished, requeued
    after a stale claim, another's): nothing changes. NotFound when there is no such job."""
    with session.begin():
        row = session.get(ProfileJobRow, job_id, with_for_update=True)
        if row is None:
            raise d.NotFound(f"no profile job {job_id}")
        if row.state != "running" or row.worker != worker:
            return False, _record(row)
        row.state, row.worker, row.claimed_at = "queued", None, None
        session.flush()
        return True, _record(row)
