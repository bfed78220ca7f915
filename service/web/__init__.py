"""The dashboard: server-rendered pages under /ui for reviewing searches, candidates, trials, simulators.

Served by the same FastAPI app as the API (``install(app)``); charts use plotly.js from the plotly
Python package's own bundle, so nothing is fetched from the internet.
"""

from __future__ import annotations

from pathlib import Path

import plotly
from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from service.web import (
    auth,
    pages_create,
    pages_exports,
    pages_searches,
    pages_simulators,
    pages_specs,
    pages_strategy,
    pages_workers,
)

PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"

router = APIRouter(prefix="/ui", include_in_schema=False)
router.include_router(auth.router)
router.include_router(pages_specs.router)
router.include_router(pages_create.router)  # before pages_searches: /searches/new is not an id
router.include_router(pages_searches.router)
router.include_router(pages_exports.router)
router.include_router(pages_strategy.router)
router.include_router(pages_simulators.router)
router.include_router(pages_workers.router)


@router.get("/static/plotly.min.js")
def plotly_js() -> FileResponse:
    return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})


def install(app: FastAPI) -> None:
    """Mount the dashboard's pages and static files on ``app``."""
    app.include_router(router)
    app.mount(
        "/ui/assets", StaticFiles(directory=Path(__file__).resolve().parent / "static"), name="ui-assets"
    )
