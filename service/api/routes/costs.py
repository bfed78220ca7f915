"""/searches/{id}/costs: a cost-objective (heterogeneous) search's plans with money, throughput, provisioning."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.orm import Session

from service.api.deps import SessionDep, UserDep, owner_filter
from service.api.params import IdPath
from service.api.schemas.costs import CostsPublic
from service.api.schemas.searches import SearchStatusPublic
from service.db import repository as repo
from service.plans.heterogeneous_results import load_results

router = APIRouter(prefix="/searches", tags=["searches"])


@router.get("/{search_id}/costs", response_model=CostsPublic)
def get_costs(search_id: IdPath, session: SessionDep, user: UserDep) -> CostsPublic:
    """Every plan the search evaluated (candidates and baselines) with its predicted and measured
    money and throughput and its per-stage units, the money vs throughput fronts, the cheapest
    measured plan meeting the throughput limit and its savings over each baseline.

    409 for a search that is not a heterogeneous (cost-objective) one.
    """
    return CostsPublic.of(search_id, load_results(session, search_id=search_id, owner_id=owner_filter(user)))


def cheapest_as_best(
    session: Session, status: SearchStatusPublic, owner_id: int | None
) -> SearchStatusPublic:
    """A heterogeneous search's status with its best = the cheapest measured candidate meeting the limit.

    The status's generic best is the fastest candidate, which for a cost objective with a throughput
    limit is the most expensive one that was tried; here it is the candidate the search answers with.
    """
    r = load_results(session, search_id=status.search.id, owner_id=owner_id)
    meeting = [p for p in r.plans if p.candidate_id is not None and p.measured and p.meets_limit]
    best = min(meeting, key=lambda p: (p.measured_money or 0.0, p.label), default=None)
    by_id = {t.id: t for t in repo.list_trials(session, search_id=status.search.id, owner_id=owner_id)}
    trial = by_id.get(best.trial_id) if best is not None and best.trial_id is not None else None
    status.best_trial_id = trial.id if trial else None
    status.best_candidate_id = best.candidate_id if best else None
    status.best_time = trial.median_time if trial else None
    return status
