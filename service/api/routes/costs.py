"""/searches/{id}/costs: a cost-objective (heterogeneous) search's plans with money, throughput, provisioning."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import SessionDep, UserDep, owner_filter
from service.api.params import IdPath
from service.api.schemas.common import Message
from service.api.schemas.costs import CostsPublic
from service.plans.heterogeneous_results import load_results

router = APIRouter(prefix="/searches", tags=["searches"])


@router.get(
    "/{search_id}/costs",
    response_model=CostsPublic,
    responses={409: {"model": Message, "description": "The search is not a heterogeneous (cost) one."}},
)
def get_costs(search_id: IdPath, session: SessionDep, user: UserDep) -> CostsPublic:
    """Every plan the search evaluated (candidates and baselines) with its predicted and measured
    money and throughput and its per-stage units, the money vs throughput fronts, the cheapest
    measured plan meeting the throughput limit and its savings over each baseline.

    409 for a search that is not a heterogeneous (cost-objective) one.
    """
    return CostsPublic.of(search_id, load_results(session, search_id=search_id, owner_id=owner_filter(user)))
