"""Data access for node agents (issue 41): registration, liveness, a pool of agents as a ClusterSpec.

An agent is one node of a user's cluster. It registers (host, rendezvous port, NIC, its GPUs as a
DeviceType and a count) and polls the API; every poll stamps ``last_seen_at``. A *pool* is the set
of agents registered under one name; ``pool_cluster`` turns its live agents into a ClusterSpec
(one node per agent, in name order), and ``store_pool_cluster`` stores that spec for a user and
remembers it belongs to the pool, so a search on it queues trials that only that pool's gangs
claim (``service.db.repo_gangs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service import domain as d
from service.db.convert import aware
from service.db.models import AgentRow, GangSlotRow, PoolSpecRow, utcnow
from service.db.repo_specs import store_spec
from simulator.spec import ClusterSpec, DeviceType


@dataclass(frozen=True)
class AgentInfo:
    """An agent as the API shows it."""

    id: int
    name: str
    pool: str
    host: str
    rdzv_port: int
    nic: str
    nic_gbps: float
    intra_gbps: float
    device: dict[str, Any]
    gpus: int
    slot_id: int | None
    last_seen_at: datetime
    live: bool


def _info(row: AgentRow, now: datetime, live_s: float) -> AgentInfo:
    seen = aware(row.last_seen_at)
    return AgentInfo(
        id=row.id,
        name=row.name,
        pool=row.pool,
        host=row.host,
        rdzv_port=row.rdzv_port,
        nic=row.nic,
        nic_gbps=row.nic_gbps,
        intra_gbps=row.intra_gbps,
        device=dict(row.device),
        gpus=row.gpus,
        slot_id=row.slot_id,
        last_seen_at=seen,
        live=(now - seen).total_seconds() <= live_s,
    )


def register_agent(
    session: Session,
    *,
    name: str,
    pool: str,
    host: str,
    rdzv_port: int,
    nic: str,
    nic_gbps: float,
    intra_gbps: float,
    device: DeviceType,
    gpus: int,
    user_id: int | None,
) -> AgentInfo:
    """Insert or refresh agent ``name``. A (re)registering agent is a fresh process: any slot it
    held is released (its ranks died with the old process) and the sweep abandons that attempt."""
    now = utcnow()
    with session.begin():
        row = session.scalars(select(AgentRow).where(AgentRow.name == name).with_for_update()).one_or_none()
        if row is None:
            row = AgentRow(name=name, pool=pool, host=host, rdzv_port=rdzv_port, nic=nic, nic_gbps=nic_gbps,
                           intra_gbps=intra_gbps, device=device.model_dump(mode="json"), gpus=gpus,
                           user_id=user_id, last_seen_at=now)  # fmt: skip
            session.add(row)
            session.flush()
            return _info(row, now, 1.0)
        if row.slot_id is not None:
            session.execute(
                update(GangSlotRow)
                .where(GangSlotRow.id == row.slot_id, GangSlotRow.state.in_(("assigned", "joined")))
                .values(state="released", reason=f"agent {name} restarted", finished_at=now)
            )
        row.pool, row.host, row.rdzv_port, row.nic = pool, host, rdzv_port, nic
        row.nic_gbps, row.intra_gbps, row.gpus = nic_gbps, intra_gbps, gpus
        row.device = device.model_dump(mode="json")
        row.user_id, row.slot_id, row.last_seen_at = user_id, None, now
        session.flush()
        return _info(row, now, 1.0)


def list_agents(session: Session, *, live_s: float, pool: str | None = None) -> list[AgentInfo]:
    """Every agent (of ``pool``), by name."""
    now = utcnow()
    with session.begin():
        q = select(AgentRow).order_by(AgentRow.name)
        if pool is not None:
            q = q.where(AgentRow.pool == pool)
        return [_info(r, now, live_s) for r in session.scalars(q)]


def pool_cluster(session: Session, *, pool: str, live_s: float, name: str | None = None) -> ClusterSpec:
    """The ClusterSpec of ``pool``'s live agents: one node per agent (named after it, name order),
    its device type and GPU count as registered, its NIC rate; intra-node bandwidth is the
    smallest any agent declared. NotFound when the pool has no live agent."""
    now = utcnow()
    with session.begin():
        rows = session.scalars(
            select(AgentRow)
            .where(AgentRow.pool == pool, AgentRow.last_seen_at >= now - timedelta(seconds=live_s))
            .order_by(AgentRow.name)
        ).all()
        if not rows:
            raise d.NotFound(f"pool {pool!r} has no live agent")
        types: dict[str, dict[str, Any]] = {}
        for r in rows:
            types.setdefault(str(r.device["name"]), dict(r.device))
        body = {
            "kind": "cluster",
            "name": name or pool,
            "description": f"agent pool {pool}",
            "device_types": list(types.values()),
            "nodes": [
                {
                    "name": r.name,
                    "device": r.device["name"],
                    "gpus": r.gpus,
                    "nic_gbps": r.nic_gbps,
                    "instance_type": f"agent {r.host}" + (f" nic {r.nic}" if r.nic else ""),
                }
                for r in rows
            ],
            "intra_node_gbps": min(r.intra_gbps for r in rows),
        }
    try:
        return ClusterSpec.model_validate(body)
    except ValidationError as e:
        raise d.Conflict(f"pool {pool!r} does not form a valid cluster: {e.errors()[0]['msg']}") from e


def store_pool_cluster(
    session: Session, *, pool: str, live_s: float, owner_id: int, name: str | None = None
) -> tuple[d.SpecRecord, ClusterSpec]:
    """Store ``pool_cluster`` as ``owner_id``'s cluster spec and tie it to the pool (idempotent)."""
    spec = pool_cluster(session, pool=pool, live_s=live_s, name=name)
    rec = store_spec(session, spec=spec, owner_id=owner_id)
    with session.begin():
        if session.scalars(select(PoolSpecRow).where(PoolSpecRow.spec_id == rec.id)).one_or_none() is None:
            session.add(PoolSpecRow(pool=pool, spec_id=rec.id))
    return rec, spec


def pool_spec_ids(session: Session, pool: str) -> list[int]:
    """Spec ids stored from ``pool`` (inside the caller's transaction)."""
    return list(session.scalars(select(PoolSpecRow.spec_id).where(PoolSpecRow.pool == pool)))
