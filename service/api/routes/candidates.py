"""/searches/{id}/candidates and /candidates/{id}: scored picks of each round; approve or reject."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import OrchestratorDep, SessionDep, SettingsDep, UserDep, notify, owner_filter
from service.api.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery, fetch, page
from service.api.params import IdPath, RoundQuery
from service.api.schemas.trials import CandidatePublic, CandidatesPublic, DecisionPublic, TrialPublic
from service.db import repository as repo
from service.settings import Settings

router = APIRouter(tags=["candidates"])


@router.get("/searches/{search_id}/candidates", response_model=CandidatesPublic)
def list_candidates(
    search_id: IdPath,
    session: SessionDep,
    user: UserDep,
    round: RoundQuery = None,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> CandidatesPublic:
    """Candidates by round then rank, with predicted time and similarity to the other picks (paged)."""
    cands = repo.list_candidates(
        session,
        search_id=search_id,
        round_index=round,
        owner_id=owner_filter(user),
        after=cursor,
        limit=fetch(limit),
    )
    shown, next_cursor = page(cands, limit)
    data = [CandidatePublic.model_validate(c) for c in shown]
    return CandidatesPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.get("/candidates/{candidate_id}", response_model=CandidatePublic)
def get_candidate(candidate_id: IdPath, session: SessionDep, user: UserDep) -> CandidatePublic:
    return CandidatePublic.model_validate(
        repo.get_candidate(session, candidate_id=candidate_id, owner_id=owner_filter(user))
    )


def _decide(
    candidate_id: IdPath,
    approve: bool,
    session: SessionDep,
    user: UserDep,
    orchestrator: OrchestratorDep,
    settings: Settings,
) -> DecisionPublic:
    before = repo.get_candidate(session, candidate_id=candidate_id, owner_id=owner_filter(user))
    cand, trial = repo.decide_candidate(
        session,
        candidate_id=candidate_id,
        approve=approve,
        owner_id=owner_filter(user),
        max_queued_trials=settings.max_queued_trials,
    )
    if cand.status != before.status:  # deciding the same way twice is a no-op: nothing to tell
        notify(lambda: orchestrator.candidate_decided(cand, trial), "candidate_decided")
    return DecisionPublic(
        candidate=CandidatePublic.model_validate(cand),
        trial=TrialPublic.model_validate(trial) if trial else None,
    )


@router.post("/candidates/{candidate_id}/approve", response_model=DecisionPublic)
def approve_candidate(
    candidate_id: IdPath,
    session: SessionDep,
    user: UserDep,
    orchestrator: OrchestratorDep,
    settings: SettingsDep,
) -> DecisionPublic:
    """Approve a proposed candidate: its trial is queued. 409 if the search needs no approval; 429
    (naming ``max_queued_trials``) while the owner's searches hold that many queued trials."""
    return _decide(candidate_id, True, session, user, orchestrator, settings)


@router.post("/candidates/{candidate_id}/reject", response_model=DecisionPublic)
def reject_candidate(
    candidate_id: IdPath,
    session: SessionDep,
    user: UserDep,
    orchestrator: OrchestratorDep,
    settings: SettingsDep,
) -> DecisionPublic:
    """Reject a proposed candidate: it is never run. 409 if the search needs no approval."""
    return _decide(candidate_id, False, session, user, orchestrator, settings)
