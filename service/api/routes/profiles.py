"""/profiles: upload (validated), list and get measured compute profiles; the compute they give;
/profiles/jobs: queue a profile job that a GPU-pool worker claims, runs and reports (issue 15)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Response, status

from service.api.deps import SessionDep, owner_filter, require
from service.api.errors import parse_request
from service.api.openapi import spec_body
from service.api.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery, fetch, page
from service.api.params import IdPath
from service.api.schemas.profiles import (
    ComputePublic,
    ProfileJobCreate,
    ProfileJobPublic,
    ProfileJobRelease,
    ProfileJobReleasePublic,
    ProfilePublic,
    ProfilesPublic,
    ProfileSummary,
)
from service.compute import estimate_compute
from service.db import repository as repo
from service.domain import Principal
from simulator.spec.limits import LIMITS, NAME_PATTERN
from simulator.spec.profile import Profile, ProfileJob, ProfileJobResult

router = APIRouter(prefix="/profiles", tags=["profiles"])
log = logging.getLogger("strategist.api")

#: Users and admins upload profiles; workers also read them and run the profile jobs (issue 15).
CallerDep = Annotated[Principal, Depends(require("user", "admin", "worker"))]
UserDep = Annotated[Principal, Depends(require("user", "admin"))]
WorkerDep = Annotated[Principal, Depends(require("worker"))]

_EXAMPLE = {
    "kind": "profile",
    "model": "NCF-dense",
    "device": "T4-16GB",
    "dtype": "float32",
    "batch": 256,
    "layers": [{"name": "embedding_user", "fwd_s": 0.0001, "bwd_s": 0.0021}],
    "source": "strategist profile on cuda",
}


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=ProfilePublic, openapi_extra=spec_body(Profile)
)
def upload_profile(
    session: SessionDep,
    caller: UserDep,
    body: Annotated[dict[str, Any], Body(openapi_examples={"one-layer": {"value": _EXAMPLE}})],
) -> ProfilePublic:
    """Store a Profile as the newest for its (model, device, dtype, batch); 422 names every bad field.

    A user's profile is theirs: only their searches and estimates use it and only they see it. An
    admin's is zoo-wide: everyone's searches use it unless they measured that key themselves. A
    worker token may not upload (403): its measurements arrive through the profile jobs users
    queue, and belong to them.
    """
    profile = parse_request(Profile, body)
    return ProfilePublic.of(repo.store_profile(session, profile=profile, owner_id=owner_filter(caller)))


@router.get("", response_model=ProfilesPublic)
def list_profiles(
    session: SessionDep,
    caller: CallerDep,
    model: Annotated[str | None, Query(max_length=LIMITS.name_chars, pattern=NAME_PATTERN)] = None,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> ProfilesPublic:
    """The zoo-wide profiles and your own (an admin: every one), of ``model`` if given, newest
    first, paged; summaries (the full profile is at ``/profiles/{id}``)."""
    recs = repo.list_profiles(
        session, viewer_id=owner_filter(caller), model=model, after=cursor, limit=fetch(limit)
    )
    shown, next_cursor = page(recs, limit)
    data = [ProfileSummary.of_summary(r) for r in shown]
    return ProfilesPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.get("/compute", response_model=ComputePublic)
def compute(
    session: SessionDep,
    caller: CallerDep,
    model: Annotated[str, Query(min_length=1, max_length=LIMITS.name_chars, pattern=NAME_PATTERN)],
    cluster: Annotated[str, Query(min_length=1, max_length=LIMITS.name_chars, pattern=NAME_PATTERN)],
) -> ComputePublic:
    """T_comp of ``model`` on ``cluster``: the stored profile for its key, else the roofline."""
    est = estimate_compute(session, model=model, cluster=cluster, owner_id=caller.user_id)
    return ComputePublic.model_validate(est)


@router.post("/jobs", status_code=status.HTTP_201_CREATED, response_model=ProfileJobPublic)
def queue_job(session: SessionDep, caller: UserDep, body: ProfileJobCreate) -> ProfileJobPublic:
    """Queue a profile job for a GPU-pool worker; the model is resolved (and frozen) now."""
    spec = repo.resolve_spec(session, kind="model", ref=body.model, owner_id=caller.user_id).model_spec()
    rec = repo.queue_profile_job(
        session,
        spec=spec,
        batch=body.batch,
        dtype=body.dtype,
        device=body.device,
        repeats=body.repeats,
        owner_id=owner_filter(caller),  # an admin's job measures a zoo-wide profile
    )
    return ProfileJobPublic.of(rec)


@router.get("/jobs/{job_id}", response_model=ProfileJobPublic)
def get_job(job_id: IdPath, session: SessionDep, caller: CallerDep) -> ProfileJobPublic:
    """A profile job you queued (an admin: any) by id; 404 if none."""
    return ProfileJobPublic.of(repo.get_profile_job(session, job_id=job_id, viewer_id=owner_filter(caller)))


@router.post(
    "/jobs/claim",
    response_model=ProfileJob,
    responses={204: {"description": "No job is queued."}},
)
def claim_job(
    session: SessionDep,
    caller: WorkerDep,
    worker: Annotated[str, Query(min_length=1, max_length=LIMITS.name_chars, pattern=NAME_PATTERN)],
) -> ProfileJob | Response:
    """A GPU-pool worker claims the oldest queued profile job; 204 when there is none."""
    rec = repo.claim_profile_job(session, worker=worker)
    if rec is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return ProfileJob(
        id=rec.id, spec=rec.spec, device=rec.device, dtype=rec.dtype, batch=rec.batch, repeats=rec.repeats
    )


@router.post(
    "/jobs/{job_id}/result", response_model=ProfileJobPublic, openapi_extra=spec_body(ProfileJobResult)
)
def report_job(
    job_id: IdPath,
    session: SessionDep,
    caller: WorkerDep,
    body: Annotated[dict[str, Any], Body()],
) -> ProfileJobPublic:
    """The claiming worker reports its job: a Profile (stored, job done) or an error (job failed).

    422 names every bad field of the profile (``body.profile.layers.0.fwd_s``); 409 when the job is
    not running for this worker or the profile is not of the job's model, dtype and batch.
    """
    result = parse_request(ProfileJobResult, body)
    rec = repo.finish_profile_job(
        session,
        job_id=job_id,
        worker=result.worker,
        profile=result.profile,
        error=result.error,
    )
    return ProfileJobPublic.of(rec)


@router.post("/jobs/{job_id}/release", response_model=ProfileJobReleasePublic)
def release_job(
    job_id: IdPath, body: ProfileJobRelease, session: SessionDep, caller: WorkerDep
) -> ProfileJobReleasePublic:
    """The claiming worker hands its running job back on a normal stop (a drain): the job is queued
    again at once for any worker. A job not running for this worker changes nothing
    (``released: false``); 404 when there is no such job."""
    released, rec = repo.release_profile_job(session, job_id=job_id, worker=body.worker)
    if released:
        log.info("profile job %s released by %s (%s)", job_id, body.worker, body.reason)
    return ProfileJobReleasePublic(released=released, job=ProfileJobPublic.of(rec))


@router.get("/{profile_id:int}", response_model=ProfilePublic)
def get_profile(profile_id: IdPath, session: SessionDep, caller: CallerDep) -> ProfilePublic:
    """A zoo-wide profile or your own by id; 404 if none."""
    return ProfilePublic.of(repo.get_profile(session, profile_id=profile_id, viewer_id=owner_filter(caller)))
