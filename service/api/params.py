"""Bounded path and query parameters shared by the routes.

Ids are stored in PostgreSQL ``integer`` columns (and SQLite's 64-bit ones), so an id outside
1..2**31-1 can name nothing: it is answered 422 on both databases instead of reaching the driver
("integer out of range" on PostgreSQL, OverflowError on SQLite past 2**63).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from simulator.spec.limits import LIMITS, NAME_PATTERN

#: An object's id in a path.
IdPath = Annotated[int, Path(ge=1, le=LIMITS.id, description="The object's id.")]
#: A round index in a query (1 = first round).
RoundQuery = Annotated[int | None, Query(ge=1, le=LIMITS.id, description="Only this round.")]
#: A '<model>__<cluster>' simulator domain in a query.
DomainQuery = Annotated[
    str | None,
    Query(max_length=2 * LIMITS.name_chars + 2, pattern=NAME_PATTERN, description="'<model>__<cluster>'."),
]
