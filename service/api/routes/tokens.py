"""/me (who am I) and /tokens (admins create, list and revoke API tokens)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, status

from service.api.deps import AdminDep, SessionDep, get_principal
from service.api.paging import DEFAULT_LIMIT, CursorQuery, LimitQuery, fetch, page
from service.api.params import IdPath
from service.api.schemas.tokens import MePublic, TokenCreate, TokenIssuedPublic, TokenPublic, TokensPublic
from service.db import repository as repo
from service.domain import Principal

router = APIRouter(tags=["tokens"])


@router.get("/me", response_model=MePublic)
def me(principal: Annotated[Principal, Depends(get_principal)]) -> MePublic:
    """The caller behind the bearer token (any role)."""
    return MePublic.model_validate(principal)


@router.post("/tokens", status_code=status.HTTP_201_CREATED, response_model=TokenIssuedPublic)
def create_token(body: TokenCreate, session: SessionDep, admin: AdminDep) -> TokenIssuedPublic:
    """Create a token (and its user if new); the secret is in this response only. 409 on a role clash."""
    issued = repo.create_token(session, name=body.name, role=body.role)
    return TokenIssuedPublic(token=issued.secret, info=TokenPublic.model_validate(issued.info))


@router.get("/tokens", response_model=TokensPublic)
def list_tokens(
    session: SessionDep, admin: AdminDep, limit: LimitQuery = DEFAULT_LIMIT, cursor: CursorQuery = None
) -> TokensPublic:
    """Every token (prefixes only), oldest first, paged."""
    shown, next_cursor = page(repo.list_tokens(session, after=cursor, limit=fetch(limit)), limit)
    data = [TokenPublic.model_validate(t) for t in shown]
    return TokensPublic(data=data, count=len(data), next_cursor=next_cursor)


@router.post("/tokens/{token_id}/revoke", response_model=TokenPublic)
def revoke_token(token_id: IdPath, request: Request, session: SessionDep, admin: AdminDep) -> TokenPublic:
    """Revoke a token; it stops authenticating at once (in every API process within
    ``token_cache_s``: `service.api.deps.PrincipalCache`)."""
    info = repo.revoke_token(session, token_id=token_id)
    request.app.state.principals.forget(token_id)
    return TokenPublic.model_validate(info)
