"""/healthz (the process is alive) and /readyz (database reachable, schema at head, broker reachable)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from service.api.schemas.tokens import HealthPublic, ReadyPublic
from service.db.engine import current_revision, head_revision, ping
from service.settings import Settings

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthPublic)
def healthz() -> HealthPublic:
    """Alive: the process answers (no dependency is checked)."""
    return HealthPublic(status="alive")


@router.get("/readyz", response_model=ReadyPublic, responses={503: {"model": ReadyPublic}})
def readyz(request: Request, response: Response) -> ReadyPublic:
    """Ready to serve: the database answers, its schema is at the newest migration, the broker answers."""
    checks: dict[str, str] = {}
    engine = request.app.state.engine
    try:
        ping(engine)
        checks["database"] = "ok"
    except Exception as e:  # any driver error means not ready; say which
        checks["database"] = f"unreachable: {type(e).__name__}: {e}"[:300]
    if checks["database"] == "ok":
        have, want = current_revision(engine), head_revision()
        checks["migrations"] = f"ok ({have})" if have == want else f"at {have}, head is {want}"
    else:
        checks["migrations"] = "unknown (database unreachable)"
    checks["broker"] = _broker_check(request.app.state.settings)
    ready = all(v.startswith("ok") or v == "skipped" for v in checks.values())
    if not ready:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return ReadyPublic(status="ready" if ready else "not ready", checks=checks)


def _broker_check(settings: Settings) -> str:
    if not settings.broker_url:
        return "skipped"
    from kombu import Connection

    try:
        with Connection(settings.broker_url, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return "ok"
    except Exception as e:  # kombu raises transport-specific errors
        return f"unreachable: {type(e).__name__}: {e}"[:300]
