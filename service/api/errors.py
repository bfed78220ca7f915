"""Mapping of domain errors to HTTP: NotFound → 404, Conflict → 409, QuotaExceeded → 429, SpecError →
422 with field paths.

A 422 always has FastAPI's shape, ``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}``, where
``loc`` starts with where the value came from (``"body"``, ``"query"``, ``"path"``) followed by the
field path inside it (e.g. ``["body", "layers", 3, "inputs", 0]``). A 422 always serialises as strict
JSON: the offending ``input`` is echoed only when it is a short, finite scalar that can be encoded
(a ``NaN`` or a lone surrogate in the request cannot make the error answer itself fail), and every
message is made printable (`service.api.text.printable`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from service.api.text import encodable, printable
from service.domain import Conflict, NotFound, QuotaExceeded
from simulator.spec import SpecError
from simulator.spec.io import parse_as

T = TypeVar("T", bound=BaseModel)


class SpecInvalid(HTTPException):
    """A spec (or strategy) in a request is invalid: 422 naming every field path and reason."""

    def __init__(self, error: SpecError, prefix: Sequence[str | int]) -> None:
        detail = [
            {"loc": [*prefix, *issue.path], "msg": issue.reason, "type": "spec_invalid"}
            for issue in error.issues
        ]
        super().__init__(status.HTTP_422_UNPROCESSABLE_CONTENT, detail)


def parse_request(kind: type[T], data: Any, loc: Sequence[str | int] = ("body",)) -> T:
    """``data`` validated as ``kind`` (``parse_as``); otherwise the 422 naming every bad field, each
    path under ``loc`` (where ``data`` came from in the request)."""
    try:
        return parse_as(kind, data)
    except SpecError as e:
        raise SpecInvalid(e, loc) from None


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
            {"detail": printable(str(exc.args[0])) if exc.args else "not found"}, status.HTTP_404_NOT_FOUND
        )

    @app.exception_handler(Conflict)
    async def conflict(_request: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse({"detail": printable(str(exc))}, status.HTTP_409_CONFLICT)

    @app.exception_handler(QuotaExceeded)
    async def quota(_request: Request, exc: QuotaExceeded) -> JSONResponse:
        return JSONResponse({"detail": printable(str(exc))}, status.HTTP_429_TOO_MANY_REQUESTS)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code != status.HTTP_405_METHOD_NOT_ALLOWED:
            return await http_exception_handler(request, exc)
        allow = ", ".join(sorted(allowed_methods(request)))
        if request.method == "OPTIONS":  # a path that exists: which methods it takes, nothing else
            return Response(status_code=status.HTTP_204_NO_CONTENT, headers={"Allow": allow})
        return JSONResponse(
            {"detail": "Method Not Allowed"}, status.HTTP_405_METHOD_NOT_ALLOWED, {"Allow": allow}
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [_clean_error(e) for e in exc.errors()]
        return JSONResponse({"detail": detail}, status.HTTP_422_UNPROCESSABLE_CONTENT)


def allowed_methods(request: Request) -> set[str]:
    """Every method some route takes at ``request``'s path (Starlette's 405 names only the first
    route's), and OPTIONS (answered by `install`'s handler). The routers are
    ``app.state.routers``, ``(prefix, router)`` pairs as `service.api.app.create_app` included them."""
    methods = {"OPTIONS"}
    path: str = request.scope["path"]
    for prefix, router in getattr(request.app.state, "routers", ()):
        if not path.startswith(prefix):
            continue
        # a fresh scope: the request's own carries FastAPI's note of the route already chosen
        scope = {"type": "http", "path": path[len(prefix) :], "root_path": "", "method": "GET"}
        for route in router.routes:
            match, _ = route.matches(scope)
            if match != Match.NONE:
                methods |= set(getattr(route, "methods", None) or ())
    return methods


def _clean_error(error: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "loc": [p if isinstance(p, int) else printable(str(p)) for p in error.get("loc", ())],
        "msg": printable(str(error.get("msg", ""))),
        "type": printable(str(error.get("type", ""))),
    }
    value = error.get("input")
    if _short_scalar(value):
        out["input"] = value
    ctx = error.get("ctx")
    if isinstance(ctx, dict):
        out["ctx"] = {
            printable(str(k)): v if _short_scalar(v) else printable(str(v)[:200]) for k, v in ctx.items()
        }
    return out


def _short_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= 200 and encodable(value)
    return value is None or (isinstance(value, bool | int) and abs(value) < 2**53)
