"""The dashboard's export links: a search's trials as CSV or JSON, with the browser's login cookie.

The same rows as the API's ``GET /api/v1/searches/{id}/trials/export`` (``service.plans.trial_export``),
served under /ui so a link on the search page works with the dashboard's cookie (the API takes a
bearer token, which a link cannot send).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from service.api.deps import SessionDep
from service.api.params import IdPath
from service.api.routes.exports import ExportFormat, export_response, search_export
from service.domain import NotFound
from service.web.auth import WebUser, owner_of
from service.web.render import page

router = APIRouter()


@router.get("/searches/{search_id}/trials/export", response_model=None)
def export_trials(
    request: Request,
    search_id: IdPath,
    session: SessionDep,
    user: WebUser,
    format: Annotated[ExportFormat, Query()] = "csv",
) -> Response:
    try:
        export = search_export(session, search_id=search_id, owner_id=owner_of(user))
    except NotFound:
        return page(request, "not_found.html", status_code=404, what=f"search {search_id}")
    return export_response(export, format)
