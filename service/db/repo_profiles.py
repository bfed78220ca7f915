"""Data access for measured compute profiles (issue 15): store an upload, list, and the ones to use.

Ownership (issue 44; docs/service.md): a profile is either zoo-wide (``owner_id`` NULL: uploaded
by an admin) or its owner's (uploaded by a user, or measured by a profile job the user queued).
A user sees and uses the zoo-wide profiles and their own, never another user's: one user's
profile cannot change another's predictions. For a (model, device, dtype, batch) key the user's
own newest profile is the one the cost model uses, else the newest zoo-wide one (an older one
stays listed as history).
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session

from service import domain as d
from service.db.models import ProfileRow
from service.db.paging import keyset
from simulator.spec.io import parse_as
from simulator.spec.profile import Profile

S = TypeVar("S", bound="Select[*tuple[Any, ...]]")


def _record(row: ProfileRow) -> d.ProfileRecord:
    from service.db.convert import aware

    return d.ProfileRecord(
        id=row.id,
        owner_id=row.owner_id,
        created_at=aware(row.created_at),
        profile=parse_as(Profile, row.body),
    )


def add_profile(session: Session, *, profile: Profile, owner_id: int | None) -> ProfileRow:
    """Add ``profile``'s row in the caller's unit of work (flushed: it has its id); the one place a
    profile row is made, for an upload and for a finished profile job alike."""
    row = ProfileRow(
        model=profile.model,
        device=profile.device,
        dtype=profile.dtype,
        batch=profile.batch,
        owner_id=owner_id,
        body=profile.model_dump(mode="json"),
    )
    session.add(row)
    session.flush()
    return row


def store_profile(session: Session, *, profile: Profile, owner_id: int | None) -> d.ProfileRecord:
    """Store ``profile`` (validated) as the newest for its key."""
    with session.begin():
        return _record(add_profile(session, profile=profile, owner_id=owner_id))


def _visible(q: S, viewer_id: int | None) -> S:
    """``q`` restricted to what ``viewer_id`` may see: the zoo-wide profiles and their own (an
    admin, ``viewer_id`` None: every profile)."""
    if viewer_id is None:
        return q
    return q.where(or_(ProfileRow.owner_id.is_(None), ProfileRow.owner_id == viewer_id))


def get_profile(session: Session, *, profile_id: int, viewer_id: int | None) -> d.ProfileRecord:
    """A stored profile by id that ``viewer_id`` may see (None: any); NotFound otherwise."""
    with session.begin():
        row = session.scalars(
            _visible(select(ProfileRow).where(ProfileRow.id == profile_id), viewer_id)
        ).first()
        if row is None:
            raise d.NotFound(f"no profile {profile_id}")
        return _record(row)


def list_profiles(
    session: Session,
    *,
    viewer_id: int | None,
    model: str | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[d.ProfileRecord]:
    """The profiles ``viewer_id`` may see (of ``model`` if given), newest first, paged by id."""
    with session.begin():
        q = _visible(select(ProfileRow), viewer_id)
        if model is not None:
            q = q.where(ProfileRow.model == model)
        q = keyset(
            q.order_by(ProfileRow.id.desc()), ProfileRow.id, after=after, limit=limit, newest_first=True
        )
        return [_record(r) for r in session.scalars(q)]


def profiles_in_use(
    session: Session, *, owner_id: int | None, model: str | None = None
) -> tuple[Profile, ...]:
    """The profiles ``owner_id``'s searches and estimates use (of ``model`` if given), one per key,
    oldest key first, for CostParams: the owner's own newest, else the newest zoo-wide one
    (``owner_id`` None: only zoo-wide ones)."""
    with session.begin():
        q = select(ProfileRow).where(
            ProfileRow.owner_id.is_(None)
            if owner_id is None
            else or_(ProfileRow.owner_id.is_(None), ProfileRow.owner_id == owner_id)
        )
        if model is not None:
            q = q.where(ProfileRow.model == model)
        rows = list(session.scalars(q.order_by(ProfileRow.id.desc())))
        own = [_record(r).profile for r in rows if r.owner_id is not None]
        shared = [_record(r).profile for r in rows if r.owner_id is None]
    newest: dict[tuple[str, str, str, int], Profile] = {}
    for profile in [*own, *shared]:  # newest first within each: the owner's first
        newest.setdefault(profile.key, profile)
    return tuple(reversed(newest.values()))
