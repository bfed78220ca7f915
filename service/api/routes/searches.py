"""/searches: create, list your own, status (best so far, speed-ups), rounds, cancel."""

from __future__ import annotations

from fastapi import APIRouter, status

from service.api.deps import (
    OrchestratorDep,
    SessionDep,
    SettingsDep,
    UserDep,
    ZooDep,
    notify,
    owner_filter,
)
from service.api.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery, fetch, page
from service.api.params import IdPath
from service.api.routes._plans import plan_options
from service.api.routes._refs import resolve_field
from service.api.schemas.common import Message
from service.api.schemas.searches import (
    PlanResultPublic,
    RoundPublic,
    RoundsPublic,
    SearchCreate,
    SearchesPublic,
    SearchPublic,
    SearchStatusPublic,
)
from service.db import repository as repo
from service.plans.heterogeneous_results import cheapest_as_best
from service.plans.results import load_plan_result, worker_hint

router = APIRouter(prefix="/searches", tags=["searches"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SearchPublic,
    responses={
        429: {"model": Message, "description": "You hold as many searches or queued trials as allowed."}
    },
)
def create_search(
    body: SearchCreate,
    session: SessionDep,
    settings: SettingsDep,
    user: UserDep,
    orchestrator: OrchestratorDep,
    zoo_cache: ZooDep,
) -> SearchPublic:
    """Store a search in state 'pending'; the search loop starts round 1 and the baselines.

    Quotas (settings ``max_active_searches``, ``max_queued_trials``) are checked before the
    search is stored (`service.db.repo_quotas.check_can_create_search`): 429 names the limit.
    """
    repo.check_can_create_search(
        session,
        owner_id=user.user_id,
        max_active_searches=settings.max_active_searches,
        max_queued_trials=settings.max_queued_trials,
    )
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
    options = plan_options(body, model, cluster)
    search = repo.create_search(
        session,
        owner_id=user.user_id,
        model=model,
        cluster=cluster,
        objective=body.objective,
        trial_budget=body.trial_budget,
        candidates_per_round=body.candidates_per_round,
        samples_per_round=body.samples_per_round,
        approval_required=body.approval_required,
        seed=body.seed,
        name=body.name,
        compression=body.compression,
        plan_kind=body.plan_kind,
        plan_options=options,
        model_factory=body.model_factory,
    )
    notify(lambda: orchestrator.search_created(search), "search_created")
    return SearchPublic.model_validate(search)


@router.get("", response_model=SearchesPublic)
def list_searches(
    session: SessionDep, user: UserDep, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> SearchesPublic:
    """Your searches, newest first (an admin: everyone's), paged."""
    found = repo.list_searches(session, owner_id=owner_filter(user), after=cursor, limit=fetch(limit))
    shown, next_cursor = page(found, limit)
    data = [SearchPublic.model_validate(s) for s in shown]
    return SearchesPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.get("/{search_id}", response_model=SearchStatusPublic)
def get_search(
    search_id: IdPath, session: SessionDep, settings: SettingsDep, user: UserDep
) -> SearchStatusPublic:
    """A search's state, round, trials, best measured time and its speed-up over each baseline.

    ``state_detail`` says when its trials wait with no live worker that can run them, or a
    running trial's worker went silent (``service.db.repo_workers.waiting_on_workers``).
    """
    found = repo.search_status(session, search_id=search_id, owner_id=owner_filter(user))
    # a cost-objective search's best is its cheapest plan meeting the limit, not its fastest
    found = cheapest_as_best(session, found, owner_id=owner_filter(user))
    st = SearchStatusPublic.model_validate(found)
    st.result = PlanResultPublic.model_validate(load_plan_result(session, found, owner_id=owner_filter(user)))
    if st.trials_by_state.get("queued", 0) or st.trials_by_state.get("running", 0):
        st.state_detail = repo.waiting_on_workers(
            session, search_id=search_id, owner_id=owner_filter(user), live_s=settings.heartbeat_timeout_s
        )
        if st.state_detail:
            hint = worker_hint(repo.list_trials(session, search_id=search_id, owner_id=owner_filter(user)))
            st.state_detail += f"; {hint}" if hint else ""
    return st


@router.get("/{search_id}/rounds", response_model=RoundsPublic)
def list_rounds(
    search_id: IdPath,
    session: SessionDep,
    user: UserDep,
    limit: LimitQuery = DEFAULT_LIMIT,
    cursor: CursorQuery = None,
) -> RoundsPublic:
    """The search's rounds, first first (paged)."""
    found = repo.list_rounds(
        session, search_id=search_id, owner_id=owner_filter(user), after=cursor, limit=fetch(limit)
    )
    shown, next_cursor = page(found, limit)
    data = [RoundPublic.model_validate(r) for r in shown]
    return RoundsPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.post("/{search_id}/cancel", response_model=SearchPublic)
def cancel_search(
    search_id: IdPath, session: SessionDep, user: UserDep, orchestrator: OrchestratorDep
) -> SearchPublic:
    """Cancel: queued trials are dropped, running ones told to stop; 409 if already finished."""
    search = repo.cancel_search(session, search_id=search_id, owner_id=owner_filter(user))
    notify(lambda: orchestrator.search_cancelled(search), "search_cancelled")
    return SearchPublic.model_validate(search)
