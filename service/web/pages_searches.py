"""Dashboard pages of searches: the list, one search (rounds, trials, best-so-far chart), a round's candidates."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy.orm import Session

from service import domain as d
from service.api.deps import OrchestratorDep, SessionDep, SettingsDep, notify
from service.api.params import IdPath
from service.db import repository as repo
from service.domain import SEARCH_FINAL, Conflict, NotFound, QuotaExceeded
from service.loop.store import search_specs
from service.plans import plan_kind
from service.plans.heterogeneous_results import cheapest_as_best
from service.plans.results import load_plan_result, worker_hint
from service.web.auth import WebUser, owner_of
from service.web.heterogeneous_views import cost_context
from service.web.plan_views import plan_labels
from service.web.render import page
from service.web.views import best_so_far, cluster_summary, predicted_vs_measured

router = APIRouter()


@router.get("/", include_in_schema=False)
def home() -> RedirectResponse:
    return RedirectResponse("/ui/searches", status_code=status.HTTP_303_SEE_OTHER)


@router.get("/searches", response_class=HTMLResponse)
def searches(request: Request, session: SessionDep, settings: SettingsDep, user: WebUser) -> HTMLResponse:
    rows = []
    results = {}  # search id -> its PlanResult (best, baseline, ratio: one shape for every plan kind)
    waiting: dict[int, str] = {}  # active searches whose trials wait for a worker that is not there
    for s in repo.list_searches(session, owner_id=owner_of(user)):
        st = cheapest_as_best(session, repo.search_status(session, search_id=s.id, owner_id=owner_of(user)))
        rows.append(st)
        results[s.id] = load_plan_result(session, st, owner_id=owner_of(user))
        if s.state not in SEARCH_FINAL and (
            line := repo.waiting_on_workers(
                session, search_id=s.id, owner_id=owner_of(user), live_s=settings.heartbeat_timeout_s
            )
        ):
            waiting[s.id] = line
    return page(request, "searches.html", statuses=rows, results=results, waiting=waiting)


@router.get("/searches/{search_id}", response_class=HTMLResponse)
def search(
    request: Request, search_id: IdPath, session: SessionDep, settings: SettingsDep, user: WebUser
) -> HTMLResponse:
    try:
        st = cheapest_as_best(
            session, repo.search_status(session, search_id=search_id, owner_id=owner_of(user))
        )
    except NotFound:
        return page(request, "not_found.html", status_code=404, what=f"search {search_id}")
    rounds = repo.list_rounds(session, search_id=search_id, owner_id=owner_of(user))
    trials = repo.list_trials(session, search_id=search_id, owner_id=owner_of(user))
    model, cluster = search_specs(session, search=st.search)
    chart = best_so_far(trials)
    costs = cost_context(session, st) if st.search.plan_kind == "heterogeneous" else {}
    waiting = repo.waiting_on_workers(
        session, search_id=search_id, owner_id=owner_of(user), live_s=settings.heartbeat_timeout_s
    )
    hint = worker_hint(trials) if waiting else ""
    return page(
        request,
        "search.html",
        st=st,
        waiting=waiting,
        hint=hint,
        result=load_plan_result(session, st, owner_id=owner_of(user)),
        rounds=rounds,
        trials=trials,
        chart=chart,
        pvm=predicted_vs_measured(trials),
        model=model,
        cluster=cluster,
        cluster_line=cluster_summary(cluster),
        plan_labels=plan_labels(trials) if st.search.plan_kind in ("pipeline", "hybrid") else {},
        predicted=predicted_ranking(session, st.search, owner_of(user)),
        **costs,
    )


def predicted_ranking(session: Session, search: d.Search, owner_id: int | None) -> list[dict[str, Any]]:
    """A predicted-only search's ranking rows (``service.plans.hybrid_threed.ranking_rows``); []
    for every other search."""
    kind = plan_kind(search.plan_kind)
    if kind is None or not kind.predicted_only(search.plan_options):
        return []
    from service.plans.hybrid_threed import ranking_rows

    cands = repo.list_candidates(session, search_id=search.id, owner_id=owner_id)
    return ranking_rows([(c.id, c.rank, c.strategy) for c in cands])


@router.get("/searches/{search_id}/rounds/{index}", response_class=HTMLResponse)
def round_page(
    request: Request, search_id: IdPath, index: IdPath, session: SessionDep, user: WebUser
) -> HTMLResponse:
    try:
        search = repo.get_search(session, search_id=search_id, owner_id=owner_of(user))
    except NotFound:
        return page(request, "not_found.html", status_code=404, what=f"search {search_id}")
    rounds = {r.index: r for r in repo.list_rounds(session, search_id=search_id, owner_id=owner_of(user))}
    if index not in rounds:
        return page(request, "not_found.html", status_code=404, what=f"round {index} of search {search_id}")
    cands = repo.list_candidates(session, search_id=search_id, round_index=index, owner_id=owner_of(user))
    trials = {
        t.candidate_id: t
        for t in repo.list_trials(session, search_id=search_id, round_index=index, owner_id=owner_of(user))
    }
    return page(
        request,
        "round.html",
        search=search,
        rnd=rounds[index],
        candidates=cands,
        trials=trials,
        error=request.query_params.get("error"),
    )


@router.post("/candidates/{candidate_id}/{decision}", response_model=None)
def decide(
    candidate_id: IdPath,
    decision: Literal["approve", "reject"],
    session: SessionDep,
    settings: SettingsDep,
    user: WebUser,
    orchestrator: OrchestratorDep,
) -> RedirectResponse | HTMLResponse:
    """The approve/reject buttons: the same data-access call and loop notification as the API's."""
    cand = repo.get_candidate(session, candidate_id=candidate_id, owner_id=owner_of(user))
    target = f"/ui/searches/{cand.search_id}/rounds/{cand.round_index}"
    try:
        cand, trial = repo.decide_candidate(
            session,
            candidate_id=candidate_id,
            approve=decision == "approve",
            owner_id=owner_of(user),
            max_queued_trials=settings.max_queued_trials,
        )
    except (Conflict, QuotaExceeded) as e:  # the quota's sentence names the setting
        return RedirectResponse(f"{target}?error={quote(str(e))}", status_code=status.HTTP_303_SEE_OTHER)
    notify(lambda: orchestrator.candidate_decided(cand, trial), "candidate_decided")
    return RedirectResponse(target, status_code=status.HTTP_303_SEE_OTHER)
