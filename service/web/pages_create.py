"""Dashboard page to create a search: the API's SearchCreate rules, with compression an explicit opt-in.

The form posts the same fields as ``POST /api/v1/searches`` and is validated by the same schema
(``SearchCreate``), so the limits and messages are the API's; a refused form is shown again with
one line naming the field and the reason. Compression defaults to ``none`` (a lossless search):
fp16 and PowerSGD change what the model learns, so asking for them is a separate, visible choice.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, cast

from fastapi import APIRouter, Form, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError
from sqlalchemy.orm import Session

from service.api.deps import OrchestratorDep, SessionDep, SettingsDep, notify
from service.api.routes._plans import plan_options
from service.api.schemas.searches import SearchCreate
from service.db import repository as repo
from service.domain import NotFound, QuotaExceeded
from service.web.auth import WebUser
from service.web.render import page
from service.web.threed_form import threed_options
from simulator import zoo

router = APIRouter()

#: The choices the form offers, with what each means (value, label).
COMPRESSIONS = (
    ("none", "none: lossless (default)"),
    ("fp16", "fp16: lossy, half-precision gradients"),
    ("powersgd", "powersgd: lossy, low-rank gradients"),
    ("all", "all: fp16 and PowerSGD"),
)


#: Schedulers a cost-objective search may use (value, label); ``service.plans.heterogeneous``.
SCHEDULERS = (
    ("exact", "exact: dynamic programming, optimal under the cost model (default)"),
    ("rl", "rl: HeterPS's LSTM + REINFORCE (up to 5 s per plan)"),
    ("greedy", "greedy"),
    ("bo-tpe", "bo-tpe: Optuna TPE"),
    ("genetic", "genetic: Optuna NSGA-II"),
)


def cost_fields(throughput_limit: str, scheduler: str) -> dict[str, object]:
    """A throughput limit makes the search a heterogeneous (HeterPS) one with these options."""
    if not throughput_limit.strip():
        return {}
    return {
        "plan_kind": "heterogeneous",
        "plan_options": {"throughput_limit": throughput_limit.strip(), "scheduler": scheduler},
    }


def plan_fields(plan: str, plan_json: str, throughput_limit: str) -> dict[str, object]:
    """``plan`` pipeline or hybrid with its JSON options (ValueError naming the field); {} for sync."""
    if plan in ("sync", "heterogeneous"):  # heterogeneous: its options are the cost fields
        if plan_json.strip():
            raise ValueError(f"plan_options: a {plan} search takes no plan options here")
        if plan == "heterogeneous" and not throughput_limit.strip():
            raise ValueError("throughput_limit: a heterogeneous search needs the samples/s to reach")
        return {}
    if throughput_limit.strip():
        raise ValueError(f"plan: a throughput limit makes a heterogeneous search, not {plan!r}")
    try:
        options = json.loads(plan_json) if plan_json.strip() else {}
    except json.JSONDecodeError as e:
        raise ValueError(f"plan_options: not JSON ({e.msg} at character {e.pos})") from None
    return {"plan_kind": plan, "plan_options": options}


def _form(
    request: Request,
    values: dict[str, str],
    error: str | None,
    code: int = 200,
    session: Session | None = None,
    user_id: int | None = None,
    notice: str | None = None,
) -> HTMLResponse:
    mine: dict[str, list[str]] = {"model": [], "cluster": []}  # the user's uploads, offered first
    if session is not None and user_id is not None:
        for kind in ("model", "cluster"):
            recs = repo.list_specs(session, kind=kind, viewer_id=user_id, limit=200)
            mine[kind] = sorted({r.name for r in recs})
    return page(
        request,
        "search_new.html",
        status_code=code,
        values=values,
        error=error,
        notice=notice,
        compressions=COMPRESSIONS,
        schedulers=SCHEDULERS,
        models=mine["model"] + [m for m in zoo.model_names() if m not in mine["model"]],
        clusters=mine["cluster"] + [c for c in zoo.cluster_names() if c not in mine["cluster"]],
    )


@router.get("/searches/new", response_class=HTMLResponse)
def new_search_form(request: Request, session: SessionDep, user: WebUser) -> HTMLResponse:
    return _form(request, DEFAULTS, None, session=session, user_id=user.user_id)


#: The create form's initial values.
DEFAULTS = {"model": "", "cluster": "", "trial_budget": "8", "candidates_per_round": "4",
            "samples_per_round": "200", "compression": "none", "name": "", "objective": "time",
            "throughput_limit": "", "scheduler": "exact", "plan": "sync", "plan_options": "",
            "space": "", "global_batch_3d": "", "zero_stages": "", "recompute": "", "micro_batches": ""}  # fmt: skip


@router.post("/searches/new", response_model=None)
def create_search(
    request: Request,
    session: SessionDep,
    user: WebUser,
    orchestrator: OrchestratorDep,
    settings: SettingsDep,
    model: Annotated[str, Form()] = "",
    cluster: Annotated[str, Form()] = "",
    trial_budget: Annotated[str, Form()] = "8",
    candidates_per_round: Annotated[str, Form()] = "4",
    samples_per_round: Annotated[str, Form()] = "200",
    compression: Annotated[str, Form()] = "none",
    name: Annotated[str, Form()] = "",
    objective: Annotated[str, Form()] = "time",
    throughput_limit: Annotated[str, Form()] = "",
    scheduler: Annotated[str, Form()] = "exact",
    plan: Annotated[str, Form()] = "sync",
    plan_json: Annotated[str, Form(alias="plan_options")] = "",
    space: Annotated[str, Form()] = "",
    global_batch_3d: Annotated[str, Form()] = "",
    zero_stages: Annotated[str, Form()] = "",
    recompute: Annotated[str, Form()] = "",
    micro_batches: Annotated[str, Form()] = "",
) -> RedirectResponse | HTMLResponse:
    if plan == "heterogeneous":
        objective = "cost"  # HeterPS plans minimise money under the throughput limit
    values = {"model": model, "cluster": cluster, "trial_budget": trial_budget,
              "candidates_per_round": candidates_per_round, "samples_per_round": samples_per_round,
              "compression": compression, "name": name, "objective": objective}  # fmt: skip
    shown = values | {"throughput_limit": throughput_limit, "scheduler": scheduler, "plan": plan,
                      "plan_options": plan_json}  # fmt: skip
    threed = {"global_batch_3d": global_batch_3d, "zero_stages": zero_stages, "recompute": recompute,
              "micro_batches": micro_batches}  # fmt: skip
    shown |= threed | {"space": space}
    try:
        kind_fields = plan_fields(plan, plan_json, throughput_limit) or cost_fields(
            throughput_limit, scheduler
        )
        if extra := threed_options(plan, space, threed):  # the hybrid kind's 3D space (issue 42)
            json_options = cast(dict[str, Any], kind_fields.get("plan_options") or {})
            kind_fields = {**kind_fields, "plan_options": {**json_options, **extra}}
    except ValueError as e:
        return _form(request, shown, str(e), status.HTTP_422_UNPROCESSABLE_CONTENT)
    try:
        body = SearchCreate.model_validate(values | kind_fields)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "form"
        return _form(request, shown, f"{field}: {first['msg']}", status.HTTP_422_UNPROCESSABLE_CONTENT)
    specs = {}
    for kind, ref in (("model", body.model), ("cluster", body.cluster)):
        try:
            specs[kind] = repo.resolve_spec(session, kind=kind, ref=ref, owner_id=user.user_id)  # type: ignore[arg-type]
        except NotFound as e:
            reason = e.args[0] if e.args else "not found"
            return _form(
                request, shown, f"{kind}: no {kind} {ref!r}: {reason}", status.HTTP_422_UNPROCESSABLE_CONTENT
            )
    try:
        options = plan_options(body, specs["model"], specs["cluster"])
    except HTTPException as e:  # the API's 422 for a plan option: its first entry as one line
        entry = cast(list[dict[str, Any]], e.detail)[0]
        where = ".".join(str(p) for p in entry["loc"][1:])
        return _form(request, shown, f"{where}: {entry['msg']}", status.HTTP_422_UNPROCESSABLE_CONTENT)
    try:  # the API's quota check (service.db.repo_quotas), its 429 as the form's one line
        repo.check_can_create_search(
            session,
            owner_id=user.user_id,
            max_active_searches=settings.max_active_searches,
            max_queued_trials=settings.max_queued_trials,
        )
    except QuotaExceeded as e:
        return _form(request, shown, str(e), status.HTTP_429_TOO_MANY_REQUESTS)
    search = repo.create_search(
        session,
        owner_id=user.user_id,
        model=specs["model"],
        cluster=specs["cluster"],
        trial_budget=body.trial_budget,
        candidates_per_round=body.candidates_per_round,
        samples_per_round=body.samples_per_round,
        name=body.name,
        compression=body.compression,
        objective=body.objective,
        plan_kind=body.plan_kind,
        plan_options=options,
    )
    notify(lambda: orchestrator.search_created(search), "search_created")
    return RedirectResponse(f"/ui/searches/{search.id}", status_code=status.HTTP_303_SEE_OTHER)
