"""Dashboard page of workers: live and silent workers per pool, what each runs, when each was last seen."""

from __future__ import annotations

from itertools import groupby

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.api.deps import SessionDep, SettingsDep
from service.db import repository as repo
from service.db.models import utcnow
from service.web.auth import WebUser
from service.web.render import page

router = APIRouter()


@router.get("/workers", response_class=HTMLResponse)
def workers(request: Request, session: SessionDep, settings: SettingsDep, user: WebUser) -> HTMLResponse:
    """Workers grouped by pool (live first); live = seen within the service's heartbeat timeout."""
    now = utcnow()
    listed = repo.list_workers(session, live_s=settings.heartbeat_timeout_s, now=now)
    listed.sort(key=lambda w: (w.pool or "?", not w.live, w.name))
    pools = [(pool, list(ws)) for pool, ws in groupby(listed, key=lambda w: w.pool or "?")]
    ages = {w.id: (now - w.last_seen_at).total_seconds() for w in listed}
    return page(request, "workers.html", pools=pools, ages=ages, live_s=settings.heartbeat_timeout_s)
