"""Mapping of domain errors to HTTP: NotFound → 404, Conflict → 409, SpecError → 422 with field paths.

A 422 always has FastAPI's shape, ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``, where
``loc`` starts with where the value came from (``"body"``, ``"query"``, ``"path"``) followed by the
field path inside it (e.g. ``["body", "layers", 3, "inputs", 0]``).
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.responses import JSONResponse

from service.domain import Conflict, NotFound
from simulator.spec import SpecError


class SpecInvalid(HTTPException):
    """A spec (or strategy) in a request is invalid: 422 naming every field path and reason."""

    def __init__(self, error: SpecError, prefix: Sequence[str | int]) -> None:
        detail = [
            {"loc": [*prefix, *issue.path], "msg": issue.reason, "type": "spec_invalid"}
            for issue in error.issues
        ]
        super().__init__(status.HTTP_422_UNPROCESSABLE_CONTENT, detail)


def field_error(loc: Sequence[str | int], msg: str, kind: str = "value_error") -> HTTPException:
    """A 422 for one request field (e.g. an unknown model name)."""
    return HTTPException(
        status.HTTP_422_UNPROCESSABLE_CONTENT, [{"loc": list(loc), "msg": msg, "type": kind}]
    )


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(NotFound)
    async def not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse(
            {"detail": str(exc.args[0]) if exc.args else "not found"}, status.HTTP_404_NOT_FOUND
        )

    @app.exception_handler(Conflict)
    async def conflict(_request: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status.HTTP_409_CONFLICT)
