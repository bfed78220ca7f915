"""Resolving a request's model/cluster reference to a stored spec, or a 422 naming the field."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from service.api.errors import field_error
from service.api.zoo_cache import ZooCache
from service.db import repository as repo
from service.domain import NotFound, SpecKind, SpecRecord


def resolve_field(
    session: Session,
    *,
    kind: SpecKind,
    ref: str | int,
    owner_id: int,
    loc: Sequence[str | int],
    zoo: ZooCache | None = None,
) -> SpecRecord:
    """The spec ``ref`` names (own upload, else zoo; or an id); 422 at ``loc`` when there is none.

    With ``zoo`` (the app's cache) a zoo entry costs no database read once it has been stored.
    """
    try:
        if isinstance(ref, str) and zoo is not None:
            upload = repo.upload_named(session, kind=kind, name=ref, owner_id=owner_id)
            return upload if upload is not None else zoo.record(session, kind=kind, name=ref)
        return repo.resolve_spec(session, kind=kind, ref=ref, owner_id=owner_id)
    except NotFound as e:
        raise field_error(
            loc, f"no {kind} {ref!r}: {e.args[0] if e.args else 'not found'}", "not_found"
        ) from None
