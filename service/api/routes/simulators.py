"""/simulators: trained simulator versions with their metrics; request a retraining."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from service.api.deps import OrchestratorDep, SessionDep, UserDep, notify
from service.api.schemas.runtimes import (
    RetrainCreate,
    RetrainRequestPublic,
    RetrainRequestsPublic,
    SimulatorVersionPublic,
    SimulatorVersionsPublic,
)
from service.db import repository as repo

router = APIRouter(prefix="/simulators", tags=["simulators"])


@router.get("", response_model=SimulatorVersionsPublic)
def list_versions(
    session: SessionDep,
    user: UserDep,
    domain: Annotated[str | None, Query(description="'<model>__<cluster>'.")] = None,
    kind: Annotated[str | None, Query(description="e.g. 'rnn', 'gat'.")] = None,
) -> SimulatorVersionsPublic:
    """Simulator versions, oldest first, with their accuracy metrics."""
    data = [
        SimulatorVersionPublic.model_validate(v)
        for v in repo.list_simulator_versions(session, domain=domain, kind=kind)
    ]
    return SimulatorVersionsPublic(data=data, count=len(data))


@router.post("/retrain", status_code=status.HTTP_202_ACCEPTED, response_model=RetrainRequestPublic)
def request_retrain(
    body: RetrainCreate, session: SessionDep, user: UserDep, orchestrator: OrchestratorDep
) -> RetrainRequestPublic:
    """Ask for the domain's simulator to be retrained (a pending request is reused); the loop runs it."""
    req = repo.request_retrain(session, domain=body.domain, requested_by=user.user_id)
    notify(lambda: orchestrator.retrain_requested(req), "retrain_requested")
    return RetrainRequestPublic.model_validate(req)


@router.get("/retrain", response_model=RetrainRequestsPublic)
def list_retrain_requests(
    session: SessionDep,
    user: UserDep,
    domain: Annotated[str | None, Query(description="'<model>__<cluster>'.")] = None,
) -> RetrainRequestsPublic:
    """Retraining requests, oldest first, with their state and the version they produced."""
    data = [
        RetrainRequestPublic.model_validate(r) for r in repo.list_retrain_requests(session, domain=domain)
    ]
    return RetrainRequestsPublic(data=data, count=len(data))


@router.get("/{version_id}", response_model=SimulatorVersionPublic)
def get_version(version_id: int, session: SessionDep, user: UserDep) -> SimulatorVersionPublic:
    return SimulatorVersionPublic.model_validate(repo.get_simulator_version(session, version_id=version_id))
