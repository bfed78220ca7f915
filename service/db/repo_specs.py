"""Data access for model and cluster specs: users' uploads and stored copies of zoo entries.

Specs are stored as validated JSON (``spec.model_dump(mode="json")``), so anything read back parses
again. A user sees their own uploads and the zoo; an admin (``viewer_id=None``) sees everything.
Searches refer to a stored spec by id, so a zoo entry is copied into the table the first time it is
used (and again only if the zoo's JSON changed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from service import domain as d
from service.db import convert
from service.db.models import SpecRow
from service.db.paging import keyset
from simulator import zoo
from simulator.spec import ClusterSpec, ModelSpec


def _kind(spec: ModelSpec | ClusterSpec) -> d.SpecKind:
    return "model" if isinstance(spec, ModelSpec) else "cluster"


def store_spec(session: Session, *, spec: ModelSpec | ClusterSpec, owner_id: int) -> d.SpecRecord:
    """Store an upload under its name for ``owner_id``.

    Uploading the identical spec again returns the stored one; a different spec under a name the
    owner already used is a Conflict (names are how searches refer to specs).
    """
    kind = _kind(spec)
    body = spec.model_dump(mode="json")
    with session.begin():
        existing = session.scalars(
            select(SpecRow).where(
                SpecRow.kind == kind, SpecRow.name == spec.name, SpecRow.owner_id == owner_id
            )
        ).first()
        if existing is not None:
            if existing.body == body:
                return convert.spec(existing)
            raise d.Conflict(f"you already uploaded a different {kind} named {spec.name!r}")
        row = SpecRow(kind=kind, name=spec.name, owner_id=owner_id, origin="upload", body=body)
        session.add(row)
        session.flush()
        return convert.spec(row)


def get_spec(session: Session, *, spec_id: int, viewer_id: int | None) -> d.SpecRecord:
    """A stored spec visible to ``viewer_id`` (None: any); NotFound otherwise."""
    with session.begin():
        row = session.get(SpecRow, spec_id)
        if row is None or not _visible(row, viewer_id):
            raise d.NotFound(f"no spec {spec_id}")
        return convert.spec(row)


def _visible(row: SpecRow, viewer_id: int | None) -> bool:
    return viewer_id is None or row.owner_id is None or row.owner_id == viewer_id


def list_specs(
    session: Session,
    *,
    kind: d.SpecKind,
    viewer_id: int | None,
    after: int | None = None,
    limit: int | None = None,
) -> list[d.SpecRecord]:
    """Uploaded specs of ``kind`` visible to ``viewer_id`` (zoo copies excluded), newest first."""
    with session.begin():
        q = select(SpecRow).where(SpecRow.kind == kind, SpecRow.origin == "upload")
        if viewer_id is not None:
            q = q.where(SpecRow.owner_id == viewer_id)
        q = keyset(q.order_by(SpecRow.id.desc()), SpecRow.id, after=after, limit=limit, newest_first=True)
        return [convert.spec(r) for r in session.scalars(q)]


@dataclass(frozen=True)
class SpecSummary:
    """A stored spec without its body: what a list shows (issue 44: lists bound their bytes)."""

    id: int
    kind: d.SpecKind
    name: str
    owner_id: int | None
    origin: Literal["upload", "zoo"]
    created_at: datetime
    # model: family, batch_size, layers, variables, params; cluster: nodes, gpus
    facts: dict[str, Any]


def spec_facts(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """The summary's numbers, read from a stored (already validated) spec's JSON without parsing it
    into a spec object (a 100k-layer model's validation takes seconds; this is one pass)."""
    if kind == "model":
        variables = [v for layer in body.get("layers", ()) for v in layer.get("variables", ())]
        return {
            "family": body.get("family", ""),
            "batch_size": body.get("batch_size", 0),
            "layers": len(body.get("layers", ())),
            "variables": len(variables),
            "params": sum(math.prod(v.get("shape", ())) for v in variables),
        }
    nodes = body.get("nodes", ())
    return {"nodes": len(nodes), "gpus": sum(int(n.get("gpus", 0)) for n in nodes)}


def list_spec_summaries(
    session: Session,
    *,
    kind: d.SpecKind,
    viewer_id: int | None,
    after: int | None = None,
    limit: int | None = None,
) -> list[SpecSummary]:
    """``list_specs`` as summaries: rows are streamed one at a time and each body is dropped once
    summarised, so a page of large specs holds one body in memory, not all of them."""
    with session.begin():
        q = select(
            SpecRow.id, SpecRow.kind, SpecRow.name, SpecRow.owner_id, SpecRow.origin, SpecRow.created_at,
            SpecRow.body,
        ).where(SpecRow.kind == kind, SpecRow.origin == "upload")  # fmt: skip
        if viewer_id is not None:
            q = q.where(SpecRow.owner_id == viewer_id)
        q = keyset(q.order_by(SpecRow.id.desc()), SpecRow.id, after=after, limit=limit, newest_first=True)
        rows = session.execute(q.execution_options(yield_per=1))
        return [
            SpecSummary(
                id=r.id,
                kind=r.kind,
                name=r.name,
                owner_id=r.owner_id,
                origin=r.origin,
                created_at=convert.aware(r.created_at),
                facts=spec_facts(r.kind, r.body),
            )
            for r in rows
        ]


def zoo_spec(session: Session, *, kind: d.SpecKind, name: str) -> d.SpecRecord:
    """The stored copy of zoo entry ``name`` (any case; stored now if needed); NotFound if the zoo lacks it."""
    try:
        name = zoo.model_name(name) if kind == "model" else zoo.cluster_name(name)
        spec: ModelSpec | ClusterSpec = zoo.model(name) if kind == "model" else zoo.cluster(name)
    except KeyError as e:
        raise d.NotFound(str(e.args[0])) from None
    body = spec.model_dump(mode="json")
    with session.begin():
        rows = session.scalars(
            select(SpecRow)
            .where(SpecRow.kind == kind, SpecRow.name == name, SpecRow.origin == "zoo")
            .order_by(SpecRow.id.desc())
        ).all()
        for row in rows:
            if row.body == body:
                return convert.spec(row)
        row = SpecRow(kind=kind, name=name, owner_id=None, origin="zoo", body=body)
        session.add(row)
        session.flush()
        return convert.spec(row)


def upload_named(session: Session, *, kind: d.SpecKind, name: str, owner_id: int) -> d.SpecRecord | None:
    """The owner's newest upload of ``kind`` named ``name``, or None."""
    with session.begin():
        row = session.scalars(
            select(SpecRow)
            .where(SpecRow.kind == kind, SpecRow.name == name, SpecRow.origin == "upload")
            .where(SpecRow.owner_id == owner_id)
            .order_by(SpecRow.id.desc())
        ).first()
        return convert.spec(row) if row is not None else None


def resolve_spec(session: Session, *, kind: d.SpecKind, ref: str | int, owner_id: int) -> d.SpecRecord:
    """A spec by id, or by name: the owner's upload of that name first, then the zoo."""
    if isinstance(ref, int):
        return get_spec(session, spec_id=ref, viewer_id=owner_id)
    found = upload_named(session, kind=kind, name=ref, owner_id=owner_id)
    return found if found is not None else zoo_spec(session, kind=kind, name=ref)
