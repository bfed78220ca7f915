"""Dashboard pages of one strategy and one trial: per-variable choices, analytical breakdown, measurements."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from service import domain as d
from service.api.deps import SessionDep
from service.api.params import IdPath
from service.compute import cost_params
from service.db import repository as repo
from service.domain import NotFound
from service.loop.store import search_specs
from service.plans.memory_view import memory_parts
from service.web.auth import WebUser, owner_of
from service.web.plan_views import plan_view
from service.web.render import page
from service.web.views import diff_counts, strategy_layers, summarize
from simulator.analytical import baseline, cost_breakdown
from simulator.spec import SpecError, Strategy
from simulator.spec.io import parse_as
from simulator.spec.measurement import measured_on

router = APIRouter()

#: The hand-optimised baselines a strategy is compared with (AutoSync supplementary §8).
COMPARED = ("horovod", "ps")


def _strategy_page(
    request: Request,
    session: Session,
    search: d.Search,
    strategy_json: dict[str, object],
    title: str,
    back: str,
    predicted: float | None,
    trial: d.Trial | None,
) -> HTMLResponse:
    plan = plan_view(strategy_json, (trial.measurement or {}).get("details") if trial else None)
    if plan is not None:  # a pipeline or hybrid plan document (issues 17, 19), not a Strategy
        return page(
            request, "plan.html", title=title, back=back, search=search, plan=plan,
            plan_kind=strategy_json.get("kind"), predicted=predicted, trial=trial,
        )  # fmt: skip
    model, cluster = search_specs(session, search=search)
    try:
        strategy = parse_as(Strategy, strategy_json)
        strategy.check(model, cluster)
    except SpecError as e:
        return page(request, "not_found.html", status_code=422, what=f"a valid strategy ({e})")
    baselines = {name: baseline(name, model, cluster) for name in COMPARED}
    layers = strategy_layers(model, strategy, baselines)
    params = cost_params(
        session, owner_id=search.owner_id, model=model.name
    )  # the owner's stored measured profiles replace the roofline
    costs = {"this strategy": cost_breakdown(model, cluster, strategy, params)}
    costs.update({name: cost_breakdown(model, cluster, b, params) for name, b in baselines.items()})
    return page(
        request,
        "strategy.html",
        title=title,
        back=back,
        search=search,
        model=model,
        cluster=cluster,
        layers=layers,
        summary=summarize(model, strategy),
        diffs=diff_counts(model, layers, COMPARED),
        breakdown=costs["this strategy"],
        costs=costs,
        memory=memory_parts(model, cluster, strategy),
        predicted=predicted,
        trial=trial,
    )


@router.get("/candidates/{candidate_id}", response_class=HTMLResponse)
def candidate_strategy(
    request: Request, candidate_id: IdPath, session: SessionDep, user: WebUser
) -> HTMLResponse:
    try:
        cand = repo.get_candidate(session, candidate_id=candidate_id, owner_id=owner_of(user))
        search = repo.get_search(session, search_id=cand.search_id, owner_id=owner_of(user))
    except NotFound:
        return page(request, "not_found.html", status_code=404, what=f"candidate {candidate_id}")
    trials = repo.list_trials(
        session, search_id=search.id, round_index=cand.round_index, owner_id=owner_of(user)
    )
    trial = next((t for t in trials if t.candidate_id == cand.id), None)
    return _strategy_page(
        request, session, search, cand.strategy,
        title=f"Candidate {cand.rank} of round {cand.round_index}",
        back=f"/ui/searches/{search.id}/rounds/{cand.round_index}",
        predicted=cand.predicted_time, trial=trial,
    )  # fmt: skip


@router.get("/trials/{trial_id}/strategy", response_class=HTMLResponse)
def trial_strategy(request: Request, trial_id: IdPath, session: SessionDep, user: WebUser) -> HTMLResponse:
    try:
        trial = repo.get_trial(session, trial_id=trial_id, owner_id=owner_of(user))
        search = repo.get_search(session, search_id=trial.search_id, owner_id=owner_of(user))
    except NotFound:
        return page(request, "not_found.html", status_code=404, what=f"trial {trial_id}")
    title = f"Baseline {trial.baseline}" if trial.baseline else f"Strategy of trial {trial.id}"
    return _strategy_page(
        request, session, search, trial.strategy, title=title, back=f"/ui/trials/{trial.id}",
        predicted=trial.predicted_time, trial=trial,
    )  # fmt: skip


@router.get("/trials/{trial_id}", response_class=HTMLResponse)
def trial_page(request: Request, trial_id: IdPath, session: SessionDep, user: WebUser) -> HTMLResponse:
    try:
        trial = repo.get_trial(session, trial_id=trial_id, owner_id=owner_of(user))
        search = repo.get_search(session, search_id=trial.search_id, owner_id=owner_of(user))
    except NotFound:
        return page(request, "not_found.html", status_code=404, what=f"trial {trial_id}")
    m = trial.measurement or {}
    error = None
    if trial.predicted_time and trial.median_time:
        error = (trial.predicted_time - trial.median_time) / trial.median_time
    return page(
        request,
        "trial.html",
        trial=trial,
        search=search,
        compute=m.get("compute_times") or [],
        waits=m.get("sync_wait_times") or [],
        measurement=m,
        error=error,
        plan=plan_view(trial.strategy, m.get("details")),
        plan_kind=trial.strategy.get("kind"),
        site=measured_on(m.get("environment") or {}) if m else None,
    )
