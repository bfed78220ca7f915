"""Paging of list endpoints: ``limit`` and ``cursor`` query parameters, ``next_cursor`` in the answer.

A client asks for ``?limit=N`` (1..1000, default 100), then passes the answer's ``next_cursor`` as
``?cursor=`` until ``next_cursor`` is null (`service.db.paging` explains why a keyset cursor).
``count`` is the number of items on the page. There is no ``total``: it would cost one more
``COUNT(*)`` per page, and the numbers people need (a search's trials per state) are already on the
search's status.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Protocol, TypeVar

from fastapi import Query

from simulator.spec.limits import LIMITS

#: Largest page; a larger ``limit`` is answered 422 naming ``query.limit``.
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100

LimitQuery = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page (1..1000).")]
CursorQuery = Annotated[
    int | None,
    Query(ge=1, le=LIMITS.id, description="The previous page's next_cursor; omit for the first page."),
]


class HasId(Protocol):
    @property
    def id(self) -> int: ...


ItemT = TypeVar("ItemT", bound=HasId)


def fetch(limit: int) -> int:
    """Rows to ask the repository for: one more than the page, to learn whether another follows."""
    return limit + 1


def page(items: Sequence[ItemT], limit: int) -> tuple[list[ItemT], int | None]:
    """The page (at most ``limit`` items) and the cursor of the next page (None: this is the last)."""
    if len(items) > limit:
        shown = list(items[:limit])
        return shown, shown[-1].id
    return list(items), None
