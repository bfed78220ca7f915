"""Data access for the retraining data and its products: runtime records, simulator versions,
retraining requests.

Runtime records come from two sources: every succeeded trial (written by ``report_trial`` in the
same unit of work as its measurement) and users' own training runs (``ingest_runtime``). Simulator
versions are numbered per (domain, kind) from 1; a version row is never modified.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from service import domain as d
from service.db import convert
from service.db.engine import affected
from service.db.models import (
    RetrainRequestRow,
    RuntimeRecordRow,
    SearchRow,
    SimulatorVersionRow,
    SpecRow,
    UserRow,
    utcnow,
)
from service.db.paging import keyset
from simulator.spec import Strategy, domain_name


def ingest_runtime(
    session: Session,
    *,
    model_name: str,
    cluster_name: str,
    strategy: Strategy,
    iteration_times: Sequence[float],
    user_id: int | None,
    search_id: int | None = None,
    measured_on: dict[str, Any] | None = None,
) -> d.RuntimeRecord:
    """Store a user's measured runtime of ``strategy`` (already checked against model and cluster)."""
    times = [float(t) for t in iteration_times]
    if not times or any(not t > 0 for t in times):
        raise ValueError("iteration_times must be a non-empty list of positive seconds")
    ordered = sorted(times)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    with session.begin():
        row = RuntimeRecordRow(
            domain=domain_name(model_name, cluster_name),
            model_name=model_name,
            cluster_name=cluster_name,
            strategy=strategy.model_dump(mode="json"),
            iteration_times=times,
            median_time=median,
            source="user",
            search_id=search_id,
            user_id=user_id,
            measured_on=measured_on,
        )
        session.add(row)
        session.flush()
        return convert.runtime_record(row)


def shared_runtime() -> ColumnElement[bool]:
    """The condition of a runtime record that may train the shared simulators (every user's).

    Issue 44: nothing one user uploads changes another's predictions. Shared (per-domain and
    pretrained) simulator versions train only on measurements of *zoo* specs taken by the service's
    own workers (a trial of a search whose model and cluster both come from the zoo) and on runtimes
    an admin contributed. A user's ``POST /runtimes`` uploads and the trials of searches on uploaded
    specs stay that user's (listed to them only), and train nothing shared.
    """
    model, cluster = aliased(SpecRow), aliased(SpecRow)
    zoo_searches = (
        select(SearchRow.id)
        .join(model, model.id == SearchRow.model_spec_id)
        .join(cluster, cluster.id == SearchRow.cluster_spec_id)
        .where(model.origin == "zoo", cluster.origin == "zoo")
    )
    admins = select(UserRow.id).where(UserRow.role == "admin")
    return or_(
        RuntimeRecordRow.user_id.in_(admins),
        and_(RuntimeRecordRow.source == "trial", RuntimeRecordRow.search_id.in_(zoo_searches)),
    )


def list_runtimes(
    session: Session,
    *,
    domain: str | None = None,
    user_id: int | None = None,
    since_id: int = 0,
    limit: int | None = None,
    shared_only: bool = False,
) -> list[d.RuntimeRecord]:
    """Runtime records, oldest first: of one domain, of one user, after ``since_id`` (incremental);
    ``shared_only``: only those that may train the shared simulators (``shared_runtime``)."""
    with session.begin():
        q = select(RuntimeRecordRow).where(RuntimeRecordRow.id > since_id)
        if shared_only:
            q = q.where(shared_runtime())
        if domain is not None:
            q = q.where(RuntimeRecordRow.domain == domain)
        if user_id is not None:
            q = q.where(RuntimeRecordRow.user_id == user_id)
        q = q.order_by(RuntimeRecordRow.id)
        if limit is not None:
            q = q.limit(limit)
        return [convert.runtime_record(r) for r in session.scalars(q)]


def count_runtimes(session: Session, *, domain: str) -> int:
    """How many runtime records a domain has (retraining triggers on growth)."""
    with session.begin():
        return int(
            session.scalar(
                select(func.count()).select_from(RuntimeRecordRow).where(RuntimeRecordRow.domain == domain)
            )
            or 0
        )


def add_simulator_version(
    session: Session,
    *,
    domain: str,
    kind: str,
    metrics: dict[str, Any],
    path: str | None,
    n_records: int,
) -> d.SimulatorVersion:
    """Register a trained simulator as the next version of (domain, kind)."""
    with session.begin():
        last = session.scalar(
            select(func.max(SimulatorVersionRow.version)).where(
                SimulatorVersionRow.domain == domain, SimulatorVersionRow.kind == kind
            )
        )
        row = SimulatorVersionRow(
            domain=domain, kind=kind, version=(last or 0) + 1, metrics=metrics, path=path, n_records=n_records
        )
        session.add(row)
        session.flush()
        return convert.simulator_version(row)


def get_simulator_version(session: Session, *, version_id: int) -> d.SimulatorVersion:
    with session.begin():
        row = session.get(SimulatorVersionRow, version_id)
        if row is None:
            raise d.NotFound(f"no simulator version {version_id}")
        return convert.simulator_version(row)


def list_simulator_versions(
    session: Session,
    *,
    domain: str | None = None,
    kind: str | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[d.SimulatorVersion]:
    """Simulator versions, oldest first, optionally of one domain and kind."""
    with session.begin():
        q = select(SimulatorVersionRow)
        if domain is not None:
            q = q.where(SimulatorVersionRow.domain == domain)
        if kind is not None:
            q = q.where(SimulatorVersionRow.kind == kind)
        q = keyset(q.order_by(SimulatorVersionRow.id), SimulatorVersionRow.id, after=after, limit=limit)
        return [convert.simulator_version(r) for r in session.scalars(q)]


def latest_simulator_version(
    session: Session, *, domain: str, kind: str | None = None
) -> d.SimulatorVersion | None:
    """The newest version for a domain (of one kind, or of any), or None at cold start."""
    with session.begin():
        q = select(SimulatorVersionRow).where(SimulatorVersionRow.domain == domain)
        if kind is not None:
            q = q.where(SimulatorVersionRow.kind == kind)
        row = session.scalars(q.order_by(SimulatorVersionRow.id.desc()).limit(1)).first()
        return convert.simulator_version(row) if row else None


def request_retrain(session: Session, *, domain: str, requested_by: int | None) -> d.RetrainRequest:
    """Record a retraining request; an already pending one for the domain is returned instead."""
    with session.begin():
        row = session.scalars(
            select(RetrainRequestRow).where(
                RetrainRequestRow.domain == domain, RetrainRequestRow.state == "pending"
            )
        ).first()
        if row is None:
            row = RetrainRequestRow(domain=domain, state="pending", requested_by=requested_by)
            session.add(row)
            session.flush()
        return convert.retrain_request(row)


def list_retrain_requests(
    session: Session,
    *,
    domain: str | None = None,
    states: Sequence[d.RetrainState] | None = None,
    requested_by: int | None = None,
) -> list[d.RetrainRequest]:
    """Retraining requests, oldest first; ``requested_by``: only that user's."""
    with session.begin():
        q = select(RetrainRequestRow)
        if requested_by is not None:
            q = q.where(RetrainRequestRow.requested_by == requested_by)
        if domain is not None:
            q = q.where(RetrainRequestRow.domain == domain)
        if states is not None:
            q = q.where(RetrainRequestRow.state.in_(list(states)))
        return [convert.retrain_request(r) for r in session.scalars(q.order_by(RetrainRequestRow.id))]


def start_retrain(session: Session, *, request_id: int) -> d.RetrainRequest | None:
    """Take a pending request (pending → running, atomic); None if someone else took it."""
    with session.begin():
        done = session.execute(
            update(RetrainRequestRow)
            .where(RetrainRequestRow.id == request_id, RetrainRequestRow.state == "pending")
            .values(state="running")
        )
        if affected(done) != 1:
            return None
        return convert.retrain_request(session.get_one(RetrainRequestRow, request_id, populate_existing=True))


def finish_retrain(
    session: Session, *, request_id: int, simulator_version_id: int | None, error: str | None = None
) -> d.RetrainRequest:
    """Close a running request: 'done' with the version it produced, or 'failed' with ``error``."""
    with session.begin():
        row = session.get(RetrainRequestRow, request_id)
        if row is None:
            raise d.NotFound(f"no retrain request {request_id}")
        if row.state != "running":
            raise d.Conflict(f"retrain request {request_id} is {row.state}, not running")
        row.state = "failed" if error else "done"
        row.error = error
        row.simulator_version_id = simulator_version_id
        row.finished_at = utcnow()
        session.flush()
        return convert.retrain_request(row)
