"""Dashboard login: a person pastes their API token once; it is kept in an HttpOnly cookie.

The cookie holds the same token the API accepts as a bearer token, so the dashboard enforces
exactly the API's rules: users see their own searches, admins everyone's, worker tokens nothing.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service.api.deps import SessionDep
from service.db import repository as repo
from service.domain import Principal
from service.web.render import page

COOKIE = "strategist_token"
router = APIRouter()


def web_user(request: Request, session: SessionDep) -> Principal:
    """The logged-in person; redirects to the login page without a valid user or admin token."""
    secret = request.cookies.get(COOKIE)
    principal = repo.verify_token(session, secret=secret) if secret else None
    if principal is None or principal.role not in ("user", "admin"):
        target = quote(str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""))
        raise HTTPException(status.HTTP_303_SEE_OTHER, headers={"Location": f"/ui/login?next={target}"})
    request.state.web_user = principal
    return principal


WebUser = Annotated[Principal, Depends(web_user)]


def owner_of(user: Principal) -> int | None:
    """Whose searches a person sees: their own, or everyone's for an admin."""
    return None if user.role == "admin" else user.user_id


def _safe_next(target: str) -> str:
    return target if target.startswith("/ui/") and "//" not in target else "/ui/searches"


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/ui/searches") -> HTMLResponse:
    return page(request, "login.html", next=_safe_next(next), error=None)


@router.post("/login", response_model=None)
def login(
    request: Request,
    session: SessionDep,
    token: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/ui/searches",
) -> Response:
    principal = repo.verify_token(session, secret=token.strip())
    if principal is None or principal.role not in ("user", "admin"):
        reason = "unknown or revoked token" if principal is None else "worker tokens cannot use the dashboard"
        return page(request, "login.html", status_code=401, next=_safe_next(next), error=reason)
    response = RedirectResponse(_safe_next(next), status_code=status.HTTP_303_SEE_OTHER)
    response.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict", max_age=7 * 24 * 3600)
    return response


@router.post("/logout")
def logout() -> RedirectResponse:
    response = RedirectResponse("/ui/login", status_code=status.HTTP_303_SEE_OTHER)
    response.delete_cookie(COOKIE)
    return response
