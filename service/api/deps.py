"""Dependencies shared by the routes: database session, settings, the caller and role checks, hooks.

Decision (performance, issue 21): the dependencies that only read app or request state are
``async def``. FastAPI runs a plain ``def`` dependency in the thread pool, one hand-off per
dependency per request (a session, the settings, the caller, the role check, the zoo cache: five
on a search creation) for work that takes microseconds; an ``async def`` one runs on the event
loop. Only the database work in the routes themselves goes to the pool.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

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
    principal = await authenticate(request.app.state, credentials.credentials)
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"}
        )
    return principal


class PrincipalCache:
    """Tokens verified in the last ``ttl_s`` seconds, so that a caller's requests skip the lookup.

    Decision (measured, issue 21): verifying a token is one SELECT through SQLAlchemy and psycopg,
    ~0.5 ms of the API process's CPU (plus a thread-pool hand-off), more than everything else a
    cached zoo read costs (~0.3 ms). A client sending many requests with one token now pays it once
    per ``ttl_s``. Only successes are kept (an unknown token is looked up every time), keyed by the
    secret's sha256 (the form the database stores), never the secret itself.

    Revocation: ``POST /tokens/{id}/revoke`` drops the token here at once (`forget`), so in a
    single API process a revoked token stops authenticating on its next request, as before. A
    revocation this process does not see (another ``--api-workers`` process, ``strategist token
    revoke`` on the database) takes effect within ``ttl_s`` (``settings.token_cache_s``, 2 s by
    default; 0 turns the cache off), and so does a check already in flight in this process when the
    revocation lands (it may store the principal again). Bounded: past ``max_entries`` tokens it
    starts afresh.

    Safety: read on the event loop (a ``dict.get``), written under a lock from both the loop and
    the thread pool.
    """

    def __init__(self, ttl_s: float, *, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._by_hash: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    def get(self, key: str) -> Principal | None:
        """The principal of a token verified less than ``ttl_s`` ago, else None."""
        found = self._by_hash.get(key)
        if found is None or found[1] <= time.monotonic():
            return None
        return found[0]

    def put(self, key: str, principal: Principal) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            if len(self._by_hash) >= self.max_entries:
                self._by_hash.clear()
            self._by_hash[key] = (principal, time.monotonic() + self.ttl_s)

    def forget(self, token_id: int) -> None:
        """Drop token ``token_id`` (revoked): its next request is verified against the database."""
        with self._lock:
            for k in [k for k, (p, _) in self._by_hash.items() if p.token_id == token_id]:
                del self._by_hash[k]


async def authenticate(state: Any, secret: str) -> Principal | None:
    """The caller ``secret`` belongs to, or None: from ``state.principals`` (the app's
    `PrincipalCache`) when verified recently, else `verify` in the thread pool (and cached)."""
    cache: PrincipalCache = state.principals
    key = cache.key(secret)
    principal = cache.get(key)
    if principal is None:
        principal = await run_in_threadpool(verify, state.auth_sessions, secret)
        if principal is not None:
            cache.put(key, principal)
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
#: Worker tokens only (node agents).
WorkerDep = Annotated[Principal, Depends(require("worker"))]
#: Whoever runs a worker (claim, heartbeat, report): a worker token, or a person's own token for a
#: worker serving their uploaded clusters (docs/service.md#trial-routing).
ClaimerDep = Annotated[Principal, Depends(require("worker", "user", "admin"))]
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
