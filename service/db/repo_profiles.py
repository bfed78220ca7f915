"""Data access for measured compute profiles (issue 15): store an upload, list, and the ones to use.

Profiles describe hardware, not a user's private data: every caller sees every profile, and the
newest upload for a (model, device, dtype, batch) key is the one the cost model uses (an older one
stays listed as history).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service import domain as d
from service.db.models import ProfileRow
from simulator.spec.io import parse_as
from simulator.spec.profile import Profile


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


def get_profile(session: Session, *, profile_id: int) -> d.ProfileRecord:
    """A stored profile by id; NotFound otherwise."""
    with session.begin():
        row = session.get(ProfileRow, profile_id)
        if row is None:
            raise d.NotFound(f"no profile {profile_id}")
        return _record(row)


def list_profiles(session: Session, *, model: str | None = None) -> list[d.ProfileRecord]:
    """Every stored profile (of ``model`` if given), newest first."""
    with session.begin():
        q = select(ProfileRow)
        if model is not None:
            q = q.where(ProfileRow.model == model)
        return [_record(r) for r in session.scalars(q.order_by(ProfileRow.id.desc()))]


def profiles_in_use(session: Session, *, model: str | None = None) -> tuple[Profile, ...]:
    """The newest profile of every key (of ``model`` if given), oldest key first, for CostParams."""
    newest: dict[tuple[str, str, str, int], Profile] = {}
    for rec in list_profiles(session, model=model):
        newest.setdefault(rec.profile.key, rec.profile)
    return tuple(reversed(newest.values()))
