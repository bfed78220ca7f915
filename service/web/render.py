"""Templates and the formatting filters the dashboard's pages share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=str(HERE / "templates"))


def seconds(x: float | None) -> str:
    """Human-readable duration: '412 ms', '3.21 s', '—' for None."""
    if x is None:
        return "—"
    if x < 1e-3:
        return f"{x * 1e6:.0f} µs"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"


def nbytes(x: float | None) -> str:
    if x is None:
        return "—"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(x) < 1024 or unit == "GB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} GB"


def tojson(x: Any) -> str:
    """JSON for embedding chart data in a <script type="application/json"> block."""
    return json.dumps(x).replace("</", "<\\/")


templates.env.filters["seconds"] = seconds
templates.env.filters["nbytes"] = nbytes
templates.env.filters["tojson_safe"] = tojson


def _kb_meaning() -> str:
    from service.plans.pipeline import KB_MEANING

    return KB_MEANING


#: What (k, b) means, on every pipeline plan (plan_details.html: candidate and trial pages).
templates.env.globals["kb_meaning"] = _kb_meaning


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render template ``name`` with ``context`` (the user, if logged in, is in request.state)."""
    context.setdefault("user", getattr(request.state, "web_user", None))
    return templates.TemplateResponse(request, name, context, status_code=status_code)
