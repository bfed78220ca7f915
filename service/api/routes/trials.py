"""/trials: state and measurements for people; heartbeat and report for the worker holding a claim."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import ClaimerDep, OrchestratorDep, SessionDep, UserDep, notify, owner_filter
from service.api.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery, fetch, page
from service.api.params import IdPath, RoundQuery
from service.api.schemas.trials import (
    HeartbeatCreate,
    HeartbeatPublic,
    ReleaseCreate,
    ReleasePublic,
    ReportCreate,
    ReportPublic,
    TrialPublic,
    TrialsPublic,
)
from service.db import repository as repo
from service.domain import TrialState

log = logging.getLogger("strategist.api")

router = APIRouter(tags=["trials"])


@router.get("/searches/{search_id}/trials", response_model=TrialsPublic)
def list_trials(
    search_id: IdPath,
    session: SessionDep,
    user: UserDep,
    state: Annotated[list[TrialState] | None, Query(description="Only trials in these states.")] = None,
    round: RoundQuery = None,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> TrialsPublic:
    """The search's trials (baselines and candidates), oldest first, with measured times (paged)."""
    trials = repo.list_trials(
        session,
        search_id=search_id,
        owner_id=owner_filter(user),
        states=state,
        round_index=round,
        after=cursor,
        limit=fetch(limit),
    )
    shown, next_cursor = page(trials, limit)
    data = [TrialPublic.model_validate(t) for t in shown]
    return TrialsPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.get("/trials/{trial_id}", response_model=TrialPublic)
def get_trial(trial_id: IdPath, session: SessionDep, user: UserDep) -> TrialPublic:
    """State, measured times and failure reason of one trial."""
    return TrialPublic.model_validate(repo.get_trial(session, trial_id=trial_id, owner_id=owner_filter(user)))


@router.post("/trials/{trial_id}/heartbeat", response_model=HeartbeatPublic)
def heartbeat(
    trial_id: IdPath, body: HeartbeatCreate, session: SessionDep, worker: ClaimerDep
) -> HeartbeatPublic:
    """The claim holder is alive. ``accepted: false``: the claim went stale; ``stop``: cancelled."""
    ack = repo.heartbeat(session, trial_id=trial_id, attempt=body.attempt, claim_token=body.claim_token)
    return HeartbeatPublic.model_validate(ack)


@router.post("/trials/{trial_id}/report", response_model=ReportPublic)
def report(
    trial_id: IdPath,
    body: ReportCreate,
    session: SessionDep,
    worker: ClaimerDep,
    orchestrator: OrchestratorDep,
) -> ReportPublic:
    """Report the trial's measurement once; a duplicate or stale report changes nothing (recorded=false)."""
    out = repo.report_trial(
        session,
        trial_id=trial_id,
        attempt=body.attempt,
        claim_token=body.claim_token,
        measurement=body.measurement,
    )
    if out.recorded:
        notify(lambda: orchestrator.trial_finished(out.trial), "trial_finished")
    return ReportPublic(recorded=out.recorded, trial=TrialPublic.model_validate(out.trial))


@router.post("/trials/{trial_id}/release", response_model=ReleasePublic)
def release(
    trial_id: IdPath,
    body: ReleaseCreate,
    session: SessionDep,
    worker: ClaimerDep,
    orchestrator: OrchestratorDep,
) -> ReleasePublic:
    """Hand a claimed trial back on a normal stop (a worker draining): it is queued again at once
    with its attempt not counted, or ends 'cancelled' if its search was cancelled meanwhile. A
    stale claim changes nothing (``released: false``)."""
    released, trial = repo.release_trial(
        session,
        trial_id=trial_id,
        attempt=body.attempt,
        claim_token=body.claim_token,
        reason=body.reason,
    )
    if released:
        log.info("trial %s released by %s (%s): now %s", trial_id, body.worker, body.reason, trial.state)
        if trial.state != "queued":
            notify(lambda: orchestrator.trial_finished(trial), "trial_finished")
    return ReleasePublic(released=released, trial=TrialPublic.model_validate(trial))
