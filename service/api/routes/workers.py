"""/workers: a worker claims a trial for the clusters it can run; people list the workers and their liveness."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from service.api.deps import ClaimerDep, SessionDep, SettingsDep, UserDep
from service.api.schemas.trials import ClaimCreate, ClaimPublic, TrialPublic, WorkerPublic, WorkersPublic
from service.db import repository as repo

router = APIRouter(prefix="/workers", tags=["workers"])


@router.post(
    "/claim",
    response_model=ClaimPublic,
    responses={204: {"description": "Nothing queued on those clusters."}},
)
def claim(
    body: ClaimCreate, session: SessionDep, worker: ClaimerDep, response: Response
) -> ClaimPublic | Response:
    """Claim the oldest queued trial on one of ``clusters`` (atomic: each trial goes to one worker).

    Routed by cluster spec id: each name is the token's user's own cluster of that name, else the
    zoo's; a user token claims only that user's searches (docs/service.md#trial-routing).
    """
    name = body.worker or worker.name
    # Every claim poll is the worker's heartbeat while idle (service.db.repo_workers).
    repo.touch_worker(session, name=name, user_id=worker.user_id, clusters=body.clusters, pool=body.pool)
    got = repo.claim_trial(
        session,
        worker=name,
        clusters=body.clusters,
        trial_id=body.trial_id,
        user_id=worker.user_id,
        own_searches_only=worker.role == "user",
    )
    if got is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return ClaimPublic(
        trial=TrialPublic.model_validate(got.trial),
        attempt=got.attempt,
        claim_token=got.claim_token,
        model=got.model,
        cluster=got.cluster,
        model_factory=got.model_factory,
    )


@router.get("", response_model=WorkersPublic)
def list_workers(
    session: SessionDep,
    settings: SettingsDep,
    user: UserDep,
    live: Annotated[bool, Query(description="Only workers seen within the heartbeat timeout.")] = False,
) -> WorkersPublic:
    """Every worker seen, most recent first: pool, clusters, last seen, live or not, current trial.

    A worker is live when its last claim poll or trial heartbeat is younger than the service's
    ``heartbeat_timeout_s``.
    """
    data = [
        WorkerPublic.model_validate(w)
        for w in repo.list_workers(session, live_s=settings.heartbeat_timeout_s, live_only=live)
    ]
    return WorkersPublic(data=data, count=len(data))
