"""The FastAPI application factory: routes under /api/v1, health at the root, OpenAPI with examples."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI

from service import web
from service.api import errors, openapi
from service.api.deps import PrincipalCache
from service.api.guard import RequestGuard
from service.api.hooks import Orchestrator, StoreOnly
from service.api.routes import (
    agents,
    candidates,
    clusters,
    costs,
    exports,
    health,
    models,
    profiles,
    runtimes,
    searches,
    simulators,
    tokens,
    trials,
    workers,
)
from service.api.schemas.common import Message
from service.api.zoo_cache import ZooCache
from service.db import repository as repo
from service.db.engine import make_engine, session_factory, upgrade
from service.settings import Settings

API_PREFIX = "/api/v1"
#: The error answers every /api/v1 route may give, documented once in the OpenAPI schema.
COMMON_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": Message, "description": "The request could not be read (a malformed body or header)."},
    401: {"model": Message, "description": "Missing, unknown or revoked bearer token."},
    403: {"model": Message, "description": "The token's role may not use this endpoint."},
    404: {"model": Message, "description": "No such object, or not yours."},
    409: {"model": Message, "description": "Not allowed in the object's current state."},
    413: {"model": Message, "description": "The request body is larger than the configured maximum."},
}
log = logging.getLogger("strategist.api")

DESCRIPTION = """
strategist finds the synchronisation and parallelisation strategy that trains a model fastest (or
cheapest) on a cluster: it samples strategies, scores them with a simulator, runs the best diverse
candidates as real trials on workers, and retrains the simulator on what it measured.

Authenticate with `Authorization: Bearer <token>` (`strategist token create --role user`).
Users see only their own searches; worker tokens may only claim, heartbeat and report trials.
"""


def freeze_startup_objects() -> None:
    """Move everything alive at startup out of the garbage collector's sight (``gc.freeze``).

    Decision (measured, issue 21): the API process holds ~220,000 objects once the app is built
    (FastAPI routes and schemas, pydantic validators, SQLAlchemy mappers, the zoo); a full (gen 2)
    collection walks them all and took ~60-120 ms on these machines, a stop of every request in
    flight, i.e. a p99 of at least that much whenever one falls inside the window measured. Those
    objects live as long as the process, so there is nothing to collect among them: frozen, a full
    collection walks only what was allocated since (~0.1 ms). Garbage made after startup is still
    collected as before; a cycle that was already garbage at startup is collected first.
    """
    gc.collect()
    gc.freeze()


def app_from_env() -> FastAPI:
    """The app of one uvicorn worker process (``uvicorn --factory service.api.app:app_from_env``).

    Settings come from the environment; no orchestrator: the search loop runs in another process
    and finds new searches, decisions and reports by polling the database (`service.loop`).
    """
    return create_app(Settings())


def create_app(settings: Settings | None = None, *, orchestrator: Orchestrator | None = None) -> FastAPI:
    """Build the API on ``settings``'s database.

    ``orchestrator`` hears about new searches, decisions, finished trials and retrain requests (the
    search loop passes itself); without one the API only stores them and a loop polling the
    database picks them up. With ``settings.migrate_on_start`` the schema is upgraded to head first;
    with ``settings.admin_token`` that admin token is ensured.
    """
    settings = settings or Settings()
    if settings.embedded_database:
        settings.ensure_dirs()
    if settings.migrate_on_start:
        upgrade(settings.database_url)
    engine = make_engine(settings.database_url, echo=settings.echo_sql, pool_size=settings.db_pool_size)
    sessions = session_factory(engine)
    if settings.admin_token:
        with sessions() as session:
            repo.ensure_token(session, name="admin", role="admin", secret=settings.admin_token)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        freeze_startup_objects()
        yield
        gc.unfreeze()  # an app stopped inside a longer-lived process (the tests) can be collected
        engine.dispose()

    app = FastAPI(
        title="strategist",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_tags=[
            {"name": "models", "description": "Model specs: upload, list, the zoo."},
            {"name": "clusters", "description": "Cluster specs: upload, list, the zoo."},
            {"name": "searches", "description": "Strategy searches and their progress."},
            {"name": "candidates", "description": "Each round's selected strategies; approval."},
            {"name": "trials", "description": "Trial runs, their measurements; worker heartbeat/report."},
            {"name": "workers", "description": "Workers claim trials."},
            {"name": "runtimes", "description": "Measured runtimes from your own training runs."},
            {"name": "simulators", "description": "Simulator versions and retraining."},
            {"name": "tokens", "description": "API tokens and the caller."},
            {"name": "health", "description": "Liveness and readiness."},
        ],
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = sessions
    # Token checks (every /api/v1 request) read one row: autocommit saves BEGIN and COMMIT, two of
    # the four database round trips per check (the pool's pre-ping is the other).
    app.state.auth_sessions = session_factory(engine.execution_options(isolation_level="AUTOCOMMIT"))
    # ... and a token verified in the last token_cache_s seconds is not looked up again.
    app.state.principals = PrincipalCache(settings.token_cache_s)
    app.state.orchestrator = orchestrator or StoreOnly()
    app.state.zoo = ZooCache()
    errors.install(app)
    openapi.install(app)
    app.add_middleware(
        RequestGuard,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        api_prefix=API_PREFIX,
    )
    routers: list[tuple[str, APIRouter]] = []
    app.state.routers = routers  # for the Allow header of 405 and OPTIONS (service.api.errors)
    for module in (
        models,
        clusters,
        searches,
        costs,
        candidates,
        exports,
        trials,
        workers,
        runtimes,
        simulators,
        tokens,
        profiles,
        agents,
    ):
        app.include_router(module.router, prefix=API_PREFIX, responses=COMMON_RESPONSES)
        routers.append((API_PREFIX, module.router))
    app.include_router(health.router)
    routers.append(("", health.router))
    web.install(app)
    return app
