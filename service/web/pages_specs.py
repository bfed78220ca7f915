"""Dashboard upload of a model or cluster spec (the create form's "bring your own"): POST /ui/specs.

The same as ``strategist spec upload`` or ``POST /api/v1/models|clusters``: the JSON is validated
as a ModelSpec or ClusterSpec (by its ``kind``), stored under the user, and the create form comes
back with its name filled in; a bad file comes back as one line naming the field.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, File, Request, UploadFile, status
from fastapi.responses import HTMLResponse

from service.api.deps import SessionDep
from service.db import repository as repo
from service.domain import Conflict
from service.web.auth import WebUser
from service.web.pages_create import DEFAULTS, _form
from simulator.spec import ClusterSpec, ModelSpec, SpecError
from simulator.spec.io import parse_as

router = APIRouter()

#: Largest spec file the form takes (the API's own body limit applies to POST /models too).
MAX_BYTES = 8_000_000


@router.post("/specs", response_class=HTMLResponse)
async def upload_spec(
    request: Request, session: SessionDep, user: WebUser, spec: Annotated[UploadFile, File()]
) -> HTMLResponse:
    raw = await spec.read(MAX_BYTES + 1)

    def refuse(reason: str) -> HTMLResponse:
        return _form(request, DEFAULTS, f"spec file: {reason}", status.HTTP_422_UNPROCESSABLE_CONTENT,
                     session=session, user_id=user.user_id)  # fmt: skip

    if len(raw) > MAX_BYTES:
        return refuse(f"larger than {MAX_BYTES // 1_000_000} MB")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return refuse(f"not JSON ({e})")
    kind = body.get("kind") if isinstance(body, dict) else None
    if kind not in ("model", "cluster"):
        return refuse(f"kind: must be 'model' or 'cluster', got {kind!r}")
    parsed: ModelSpec | ClusterSpec
    try:
        parsed = parse_as(ModelSpec, body) if kind == "model" else parse_as(ClusterSpec, body)
    except SpecError as e:
        return refuse(str(e))
    try:
        stored = repo.store_spec(session, spec=parsed, owner_id=user.user_id)
    except Conflict as e:
        return refuse(str(e))
    values = DEFAULTS | {str(kind): stored.name}
    notice = f"uploaded {kind} {stored.name!r} (id {stored.id}): it is yours, offered first below"
    if isinstance(parsed, ClusterSpec):
        from simulator.spec.defaults import cluster_defaults

        matter = [n.field for n in cluster_defaults(parsed) if n.changes_answer]
        if matter:  # the full list: `strategist spec show --id N --kind cluster`
            notice += f"; left at a default that changes the answer: {', '.join(matter)}"
    return _form(request, values, None, session=session, user_id=user.user_id, notice=notice)
