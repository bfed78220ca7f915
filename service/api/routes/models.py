"""/models: upload (validated), list and get model specs; the zoo's models by name."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response, status

from service.api.deps import SessionDep, UserDep, ZooDep, owner_filter
from service.api.errors import parse_request
from service.api.openapi import spec_body
from service.api.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery, fetch, page
from service.api.params import IdPath
from service.api.schemas.specs import ModelPublic, ModelsPublic, ModelSummary, ZooPublic
from service.db import repository as repo
from service.domain import NotFound
from simulator import zoo
from simulator.spec import ModelSpec

router = APIRouter(prefix="/models", tags=["models"])

_EXAMPLE = {
    "kind": "model",
    "name": "tiny-mlp",
    "batch_size": 8,
    "layers": [
        {
            "name": "fc1",
            "kind": "linear",
            "fwd_flops": 4096,
            "activation_bytes": 128,
            "variables": [{"name": "fc1.weight", "shape": [64, 32]}],
        }
    ],
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ModelPublic,
    openapi_extra=spec_body(ModelSpec),
)
def upload_model(
    session: SessionDep,
    user: UserDep,
    body: Annotated[dict[str, Any], Body(openapi_examples={"tiny": {"value": _EXAMPLE}})],
) -> ModelPublic:
    """Upload a ModelSpec; 422 with the field path of every problem, and nothing stored."""
    spec = parse_request(ModelSpec, body)
    return ModelPublic.of(repo.store_spec(session, spec=spec, owner_id=user.user_id), spec)


@router.get("", response_model=ModelsPublic)
def list_models(
    session: SessionDep, user: UserDep, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> ModelsPublic:
    """Your uploaded models, newest first (an admin: everyone's), paged: summaries (name, owner,
    sizes), so a page's bytes do not grow with the specs; the full spec is at ``/models/{id}``."""
    recs = repo.list_spec_summaries(
        session, kind="model", viewer_id=owner_filter(user), after=cursor, limit=fetch(limit)
    )
    shown, next_cursor = page(recs, limit)
    data = [ModelSummary.of_summary(r) for r in shown]
    return ModelsPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.get("/zoo", response_model=ZooPublic)
def list_zoo_models(user: UserDep) -> ZooPublic:
    """Names of the built-in zoo's models (usable in a search without uploading)."""
    names = zoo.model_names()
    return ZooPublic(data=names, count=len(names))


@router.get(
    "/zoo/{name}",
    response_model=ModelPublic,
    responses={304: {"description": "Not modified (If-None-Match)."}},
)
async def get_zoo_model(name: str, request: Request, zoo_cache: ZooDep, user: UserDep) -> Response:
    """A zoo model by name; 404 if the zoo has none.

    Rendered once per process and served from memory with an ETag; ``If-None-Match`` with the
    current one gets 304 (`service.api.zoo_cache`).
    """
    return await zoo_cache.response(request, kind="model", name=name)


@router.get("/{model_id}", response_model=ModelPublic)
def get_model(model_id: IdPath, session: SessionDep, user: UserDep) -> ModelPublic:
    """A stored model: yours or a zoo copy (404 for another user's)."""
    rec = repo.get_spec(session, spec_id=model_id, viewer_id=owner_filter(user))
    if rec.kind != "model":
        raise NotFound(f"no model {model_id}")
    return ModelPublic.of(rec)
