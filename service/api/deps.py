"""Dependencies shared by the routes: database session, settings, the caller and role checks, hooks.

Decision (performance, issue 21): the dependencies that only read app or request state are
``async def``. FastAPI runs a plain ``def`` dependency in the thread pool, one hand-off per
dependency per request (a session, the settings, the caller, the role check, the zoo cache: five
on a search creation) for work that takes microseconds; an ``async def`` one runs on the event
loop. Only the database work in the routes themselves goes to the pool.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.api.hooks import Orchestrator
from service.api.zoo_cache import ZooCache
from service.db import repository as repo
from service.domain import Principal, Role
from service.settings import Settings

log = logging.getLogger("strategist.api")

_bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer stg_...`.")


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request (each data-access call in it is its own unit of work).

    Opening it touches no database (a session connects on first use); closing it returns a
    connection only if a route left one checked out, which the repository's ``with session.begin()``
    blocks never do, so neither end blocks the event loop.
    """
    with request.app.state.sessions() as session:
        yield session


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_zoo(request: Request) -> ZooCache:
    zoo: ZooCache = request.app.state.zoo
    return zoo


async def get_orchestrator(request: Request) -> Orchestrator:
    orchestrator: Orchestrator = request.app.state.orchestrator
    return orchestrator


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
OrchestratorDep = Annotated[Orchestrator, Depends(get_orchestrator)]
#: The app's cache of zoo entries (service.api.zoo_cache).
ZooDep = Annotated[ZooCache, Depends(get_zoo)]


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller, from a valid bearer token; 401 otherwise.

    `service.api.guard.RequestGuard` has already verified the token before the body was read and
    left the principal in the request state; the check here serves an app mounted without it.
    """
    guarded: Principal | None = getattr(request.state, "principal", None)
    if guarded is not None:
        return guarded
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "missing bearer token", headers={"WWW-Authenticate": "Bearer"}
        )
    principal = await run_in_threadpool(verify, request.app.state.auth_sessions, credentials.credentials)
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"}
        )
    return principal


def verify(sessions: sessionmaker[Session], secret: str) -> Principal | None:
    """The caller ``secret`` belongs to (``repo.verify_token``), or None; its own short session.

    ``sessions``: the app's ``auth_sessions`` (``service.api.app.create_app``), in autocommit: the
    lookup is one SELECT, without the BEGIN and COMMIT round trips of a transaction around it.
    """
    with sessions() as session:
        return repo.verify_token(session, secret=secret)


def require(*roles: Role) -> Callable[[Principal], Awaitable[Principal]]:
    """A dependency admitting only callers with one of ``roles`` (403 for the others)."""

    async def check(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        if principal.role not in roles:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"this endpoint is for {' or '.join(roles)} tokens, not {principal.role}",
            )
        return principal

    return check


#: People: users and admins (workers get 403).
UserDep = Annotated[Principal, Depends(require("user", "admin"))]
#: Workers only (claim, heartbeat, report).
WorkerDep = Annotated[Principal, Depends(require("worker"))]
#: Admins only.
AdminDep = Annotated[Principal, Depends(require("admin"))]


def owner_filter(principal: Principal) -> int | None:
    """The owner id a caller's reads are restricted to: their own, or None (everyone's) for admins."""
    return None if principal.role == "admin" else principal.user_id


def notify(action: Callable[[], None], what: str) -> None:
    """Run a hook after commit; a failing hook is logged, never turned into a failed request."""
    try:
        action()
    except Exception:  # the state is stored; the loop's poll will still find it
        log.exception("orchestrator hook %s failed", what)
