"""/simulators: trained simulator versions with their metrics; request a retraining."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from sqlalchemy.orm import Session

from service.api.deps import OrchestratorDep, SessionDep, UserDep, notify, owner_filter
from service.api.errors import field_error
from service.api.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery, fetch, page
from service.api.params import DomainQuery, IdPath
from service.api.schemas.runtimes import (
    RetrainCreate,
    RetrainRequestPublic,
    RetrainRequestsPublic,
    SimulatorVersionPublic,
    SimulatorVersionsPublic,
)
from service.db import repository as repo
from service.domain import NotFound, Principal
from simulator.spec import domain_name, domain_splits
from simulator.spec.limits import NAME_PATTERN

router = APIRouter(prefix="/simulators", tags=["simulators"])


@router.get("", response_model=SimulatorVersionsPublic)
def list_versions(
    session: SessionDep,
    user: UserDep,
    domain: DomainQuery = None,
    kind: Annotated[
        str | None, Query(max_length=32, pattern=NAME_PATTERN, description="e.g. 'rnn', 'gat'.")
    ] = None,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> SimulatorVersionsPublic:
    """Simulator versions, oldest first, with their accuracy metrics (paged)."""
    found = repo.list_simulator_versions(session, domain=domain, kind=kind, after=cursor, limit=fetch(limit))
    shown, next_cursor = page(found, limit)
    data = [SimulatorVersionPublic.model_validate(v) for v in shown]
    return SimulatorVersionsPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.post("/retrain", status_code=status.HTTP_202_ACCEPTED, response_model=RetrainRequestPublic)
def request_retrain(
    body: RetrainCreate, session: SessionDep, user: UserDep, orchestrator: OrchestratorDep
) -> RetrainRequestPublic:
    """Ask for the domain's simulator to be retrained (a pending request is reused); the loop runs it.

    The domain must name a model and a cluster the caller can use (their uploads or the zoo, zoo
    names in any case), or, for an admin, a domain with measured runtimes; 422 otherwise. A pending
    request of the same domain made by someone else is shared, without saying who made it.
    """
    domain = _known_domain(session, body.domain, user)
    req = repo.request_retrain(session, domain=domain, requested_by=user.user_id)
    notify(lambda: orchestrator.retrain_requested(req), "retrain_requested")
    out = RetrainRequestPublic.model_validate(req)
    if user.role != "admin" and out.requested_by != user.user_id:
        out.requested_by = None
    return out


def _known_domain(session: Session, domain: str, user: Principal) -> str:
    """The canonical '<model>__<cluster>' of a domain the caller may retrain; 422 otherwise.

    Names may themselves contain '__', so every reading is tried, leftmost first
    (``simulator.spec.domain_splits``).
    """
    for model_ref, cluster_ref in domain_splits(domain):
        try:
            model = repo.resolve_spec(session, kind="model", ref=model_ref, owner_id=user.user_id)
            cluster = repo.resolve_spec(session, kind="cluster", ref=cluster_ref, owner_id=user.user_id)
            return domain_name(model.name, cluster.name)
        except NotFound:
            continue
    if user.role == "admin" and repo.count_runtimes(session, domain=domain) > 0:
        return domain
    raise field_error(
        ["body", "domain"],
        f"no model and cluster of yours or the zoo's make the domain {domain!r}",
        "not_found",
    )


@router.get("/retrain", response_model=RetrainRequestsPublic)
def list_retrain_requests(
    session: SessionDep,
    user: UserDep,
    domain: DomainQuery = None,
) -> RetrainRequestsPublic:
    """Your retraining requests (an admin: everyone's), oldest first, with their state and version."""
    requests = repo.list_retrain_requests(session, domain=domain, requested_by=owner_filter(user))
    data = [RetrainRequestPublic.model_validate(r) for r in requests]
    return RetrainRequestsPublic(data=data, count=len(data))


@router.get("/{version_id}", response_model=SimulatorVersionPublic)
def get_version(version_id: IdPath, session: SessionDep, user: UserDep) -> SimulatorVersionPublic:
    return SimulatorVersionPublic.model_validate(repo.get_simulator_version(session, version_id=version_id))
