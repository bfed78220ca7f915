"""The door: body size (413) and authentication (401) decided before any request body is read; the
body then read in full within a deadline (408) and refused if it holds text that cannot be encoded
(422).

FastAPI reads and parses a JSON body before it resolves a route's dependencies, so a size check or
an authentication check in a dependency comes after the parse. `RequestGuard` is plain ASGI
middleware in front of everything:

1. a ``Content-Length`` above ``settings.max_body_bytes`` is answered 413 at once, unread;
2. every ``/api/v1`` request must carry a valid bearer token, checked against the database before
   the body is touched (401 otherwise; a token verified in the last ``settings.token_cache_s``
   seconds is taken from `service.api.deps.PrincipalCache` instead); the principal is left in
   ``scope["state"]["principal"]`` for `service.api.deps.get_principal`, so the token is
   verified once per request at most;
3. every body is read by the guard, counting, within ``settings.body_timeout_s`` seconds of the
   headers (408 past it: a client that announces a body and never sends it holds nothing open);
   a chunked one is answered 413 as soon as it passes the limit;
4. a JSON body with a lone UTF-16 surrogate (``"\\udfff"``, which nothing can encode as UTF-8) is
   answered 422 naming each field (`service.api.text`), so no route, error answer or database
   driver ever sees one; otherwise the buffered body is replayed to the application.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.deps import authenticate
from service.api.text import surrogate_issues
from service.domain import Principal

API_PREFIX = "/api/v1"


class RequestGuard:
    """ASGI middleware enforcing the body limit and API authentication before the body is read."""

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, body_timeout_s: float = 30.0, api_prefix: str = API_PREFIX
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.api_prefix = api_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                await _answer(send, 400, "invalid Content-Length header")
                return
            if int(length) > self.max_body_bytes:
                await self._too_large(send)
                return
        path: str = scope["path"]
        if path == self.api_prefix or path.startswith(self.api_prefix + "/"):
            principal, reason = await _authenticate(scope, headers.get("authorization"))
            if principal is None:
                await _answer(send, 401, reason, {"www-authenticate": "Bearer"})
                return
            scope.setdefault("state", {})["principal"] = principal
        chunked = length is None and "chunked" in headers.get("transfer-encoding", "").lower()
        if chunked or (length is not None and int(length) > 0):
            try:
                body = await self._read_limited(receive)
            except TimeoutError:
                await _answer(send, 408, f"the request body did not arrive within {self.body_timeout_s:g} s")
                return
            if body is None:
                await self._too_large(send)
                return
            issues = surrogate_issues(body)
            if issues:
                await _answer(send, 422, issues)
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    async def _read_limited(self, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it passes the limit (the rest is never read);
        TimeoutError when it has not all arrived within ``body_timeout_s``."""
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.body_timeout_s
        while True:
            message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.001))
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _too_large(self, send: Send) -> None:
        await _answer(send, 413, f"request body is larger than {self.max_body_bytes} bytes")


async def _authenticate(scope: Scope, authorization: str | None) -> tuple[Principal | None, str]:
    scheme, _, secret = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None, "missing bearer token"
    principal = await authenticate(scope["app"].state, secret.strip())
    return (principal, "") if principal is not None else (None, "invalid or revoked token")


def _replay(body: bytes, receive: Receive) -> Receive:
    """``body`` as one message, then the connection's own messages (a later disconnect is seen)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _answer(
    send: Send, status: int, detail: str | list[dict[str, Any]], extra: dict[str, str] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    start: dict[str, Any] = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
