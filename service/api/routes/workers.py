"""/workers: a worker claims a trial for the clusters it can run; admins list the workers seen."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from service.api.deps import AdminDep, SessionDep, WorkerDep
from service.api.schemas.trials import ClaimCreate, ClaimPublic, TrialPublic, WorkerPublic, WorkersPublic
from service.db import repository as repo

router = APIRouter(prefix="/workers", tags=["workers"])


@router.post(
    "/claim",
    response_model=ClaimPublic,
    responses={204: {"description": "Nothing queued on those clusters."}},
)
def claim(
    body: ClaimCreate, session: SessionDep, worker: WorkerDep, response: Response
) -> ClaimPublic | Response:
    """Claim the oldest queued trial on one of ``clusters`` (atomic: each trial goes to one worker)."""
    name = body.worker or worker.name
    repo.touch_worker(session, name=name, user_id=worker.user_id, clusters=body.clusters)
    got = repo.claim_trial(session, worker=name, clusters=body.clusters, trial_id=body.trial_id)
    if got is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return ClaimPublic(
        trial=TrialPublic.model_validate(got.trial),
        attempt=got.attempt,
        claim_token=got.claim_token,
        model=got.model,
        cluster=got.cluster,
    )


@router.get("", response_model=WorkersPublic)
def list_workers(session: SessionDep, admin: AdminDep) -> WorkersPublic:
    """Every worker seen, most recent first, with the clusters it advertised."""
    data = [WorkerPublic.model_validate(w) for w in repo.list_workers(session)]
    return WorkersPublic(data=data, count=len(data))
