"""/runtimes: ingest measured iteration times from users' own training runs (they feed retraining)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from service.api.deps import SessionDep, UserDep, ZooDep, owner_filter
from service.api.errors import SpecInvalid
from service.api.paging import fetch, page
from service.api.params import DomainQuery
from service.api.routes._refs import resolve_field
from service.api.schemas.runtimes import RuntimeCreate, RuntimePublic, RuntimesPublic
from service.db import repository as repo
from simulator.spec import SpecError, Strategy
from simulator.spec.io import parse_as
from simulator.spec.limits import LIMITS

router = APIRouter(prefix="/runtimes", tags=["runtimes"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RuntimePublic)
def ingest_runtime(
    body: RuntimeCreate, session: SessionDep, user: UserDep, zoo_cache: ZooDep
) -> RuntimePublic:
    """Store a measured runtime; the strategy must be valid for the model on the cluster (else 422)."""
    model = resolve_field(
        session, kind="model", ref=body.model, owner_id=user.user_id, loc=["body", "model"], zoo=zoo_cache
    )
    cluster = resolve_field(
        session,
        kind="cluster",
        ref=body.cluster,
        owner_id=user.user_id,
        loc=["body", "cluster"],
        zoo=zoo_cache,
    )
    try:
        strategy = parse_as(Strategy, body.strategy)
        strategy.check(model.model_spec(), cluster.cluster_spec())
    except SpecError as e:
        raise SpecInvalid(e, ["body", "strategy"]) from None
    rec = repo.ingest_runtime(
        session,
        model_name=model.name,
        cluster_name=cluster.name,
        strategy=strategy,
        iteration_times=body.iteration_times,
        user_id=user.user_id,
        measured_on=None if body.measured_on is None else body.measured_on.model_dump(mode="json"),
    )
    return RuntimePublic.model_validate(rec)


@router.get("", response_model=RuntimesPublic)
def list_runtimes(
    session: SessionDep,
    user: UserDep,
    domain: DomainQuery = None,
    since_id: Annotated[
        int, Query(ge=0, le=LIMITS.id, description="Only records with a larger id: the cursor (next_cursor).")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> RuntimesPublic:
    """Runtime records you contributed (trials of your searches and your uploads; admin: all), oldest
    first, paged: pass the answer's ``next_cursor`` as ``since_id`` for the next page."""
    recs = repo.list_runtimes(
        session, domain=domain, user_id=owner_filter(user), since_id=since_id, limit=fetch(limit)
    )
    shown, next_cursor = page(recs, limit)
    data = [RuntimePublic.model_validate(r) for r in shown]
    return RuntimesPublic(data=data, count=len(data), next_cursor=next_cursor)
