"""/searches/{id}/trials/export: a search's trials as CSV or JSON, the same columns for every plan kind.

The rows and the decision about their speed-up (against the search's result baseline, with a 95 %
bootstrap interval) are ``service.plans.trial_export``'s.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response
from sqlalchemy.orm import Session

from service.api.deps import SessionDep, UserDep, owner_filter
from service.api.params import IdPath
from service.api.schemas.exports import TrialsExportPublic
from service.db import repository as repo
from service.plans.heterogeneous_results import cheapest_as_best
from service.plans.results import load_plan_result
from service.plans.trial_export import Export, export_rows

router = APIRouter(tags=["trials"])

ExportFormat = Literal["csv", "json"]


def search_export(session: Session, *, search_id: int, owner_id: int | None) -> Export:
    """The export of a search ``owner_id`` may see (NotFound otherwise; None: any search)."""
    status = repo.search_status(session, search_id=search_id, owner_id=owner_id)
    status = cheapest_as_best(session, status, owner_id=owner_id)
    result = load_plan_result(session, status, owner_id=owner_id)
    trials = repo.list_trials(session, search_id=search_id, owner_id=owner_id)
    return export_rows(search_id, status.search.plan_kind, trials, result)


def export_response(export: Export, fmt: ExportFormat) -> Response:
    """The export as a download: ``search-<id>-trials.csv`` or ``.json``."""
    name = f"search-{export.search_id}-trials.{fmt}"
    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    if fmt == "csv":
        return Response(export.as_csv(), media_type="text/csv; charset=utf-8", headers=headers)
    body = TrialsExportPublic.model_validate(export.as_json()).model_dump_json()
    return Response(body, media_type="application/json", headers=headers)


@router.get(
    "/searches/{search_id}/trials/export",
    response_model=TrialsExportPublic,
    responses={200: {"content": {"text/csv": {}}, "description": "JSON (format=json) or CSV (format=csv)."}},
)
def export_trials(
    search_id: IdPath,
    session: SessionDep,
    user: UserDep,
    format: Annotated[ExportFormat, Query(description="csv or json.")] = "csv",
) -> Response:
    """Every trial of the search as one row, the same columns for every plan kind (CSV or JSON).

    Columns: trial id, round, kind (baseline/candidate), baseline name, plan kind, status, plan
    (one line), predicted and measured median seconds per iteration, iterations, and the speed-up
    against the search's result baseline with its 95 % bootstrap interval (``speedup_vs`` names
    that baseline). 404 for a search that is not yours.
    """
    return export_response(search_export(session, search_id=search_id, owner_id=owner_filter(user)), format)
