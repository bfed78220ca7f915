"""Keyset paging of list queries: ``limit`` rows after a cursor, the cursor being the last row's id.

The choice (issue 21): a cursor rather than an offset. A page is ``WHERE id > cursor`` (or
``< cursor`` for newest-first lists) ``ORDER BY id LIMIT n``: rows inserted while a client pages
neither repeat nor go missing, and a deep page costs an index range scan, not a scan of every row
before it. Every paged list is therefore ordered by id (candidates: ids follow (round, rank),
since a round's candidates are inserted in rank order). The repository fetches ``limit + 1`` rows;
the extra row only says whether another page exists (`service.api.paging`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute

# Select is generic over the row's column types (a TypeVarTuple), so the bound is left open.
S = TypeVar("S", bound="Select[*tuple[Any, ...]]")


def keyset(
    q: S,
    id_column: InstrumentedAttribute[int],
    *,
    after: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> S:
    """``q`` restricted to the rows after cursor ``after`` in id order, at most ``limit`` of them."""
    if after is not None:
        q = q.where(id_column < after if newest_first else id_column > after)
    if limit is not None:
        q = q.limit(limit)
    return q
