"""Gang claims (issue 41): a trial on an N-node pool cluster is held by N agents, one slot each.

Contract (both SQLite and PostgreSQL):
- ``claim_slot`` hands a whole gang out at once or nothing: in one transaction the trial goes
  queued → running (attempt + 1, fresh claim token; the conditional UPDATE of ``claim_trial``),
  one ``gang_slots`` row per node is inserted, and every chosen agent is taken by a conditional
  ``UPDATE agents SET slot_id = :slot WHERE id = :agent AND slot_id IS NULL``; if any of those
  affects no row the transaction rolls back, so two trials never half-hold the same agents.
  PostgreSQL: the candidate trial and agent rows are read ``FOR UPDATE SKIP LOCKED`` first, so a
  claimer never waits on another (no deadlock); SQLite: the reads run outside the write
  transaction and the first conditional UPDATE takes the database's write lock, the rest re-check.
  The caller is always one of the gang (the others see their slot on their next poll).
- Heartbeats are per slot and carry the attempt's claim token. A slot heartbeat also refreshes
  the trial's ``heartbeat_at`` (so the service's generic sweep leaves a live gang alone) and the
  agent's ``last_seen_at``.
- ``release_stale_gangs`` abandons a running attempt when a slot was not joined within
  ``join_timeout_s`` (a partial gang), a joined slot is silent for ``timeout_s``, a slot was
  released (its agent restarted), or every slot is done and nobody reported for ``timeout_s``:
  the trial is requeued (conditional on the attempt; failed after ``max_attempts``), every open
  slot is released and its agent freed; a released slot's heartbeat answers ``accepted=False``,
  so the surviving agents kill their ranks. The measurement goes through ``report_trial``
  (attempt + token), so a trial is measured at most once whatever is retried.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, select, update
from sqlalchemy.orm import Session

from service import domain as d
from service.db import convert
from service.db.convert import aware, maybe_aware
from service.db.engine import affected
from service.db.models import AgentRow, GangSlotRow, MeasurementRow, SearchRow, SpecRow, TrialRow, utcnow
from service.db.repo_agents import pool_spec_ids

OPEN = ("assigned", "joined")


@dataclass(frozen=True)
class SlotClaim:
    """What an agent needs to start its node of a trial attempt."""

    slot_id: int
    trial: d.Trial
    attempt: int
    claim_token: str
    node_rank: int
    nnodes: int
    rdzv_endpoint: str
    rdzv_id: str
    agents: tuple[str, ...]
    model: dict[str, Any]
    cluster: dict[str, Any]
    model_factory: str | None = None  # the search's own model (migration 0012)


@dataclass(frozen=True)
class SlotAck:
    """A slot heartbeat's answer: ``accepted=False``: the attempt is gone, kill the ranks."""

    accepted: bool
    stop: bool
    nnodes: int
    done: int


class _Lost(Exception):
    """A conditional UPDATE found the row changed: roll the whole gang back and try again."""


def _rdzv_id(trial_id: int, attempt: int) -> str:
    return f"trial{trial_id}-{attempt}"


def _claim_of(session: Session, slot: GangSlotRow) -> SlotClaim:
    trial = session.get_one(TrialRow, slot.trial_id)
    search = session.get_one(SearchRow, trial.search_id)
    gang = session.execute(
        select(GangSlotRow.node_rank, AgentRow.name)
        .join(AgentRow, AgentRow.id == GangSlotRow.agent_id)
        .where(GangSlotRow.trial_id == slot.trial_id, GangSlotRow.attempt == slot.attempt)
        .order_by(GangSlotRow.node_rank)
    ).all()
    return SlotClaim(
        slot_id=slot.id,
        trial=get_trial_in(session, trial),
        attempt=slot.attempt,
        claim_token=slot.claim_token,
        node_rank=slot.node_rank,
        nnodes=slot.nnodes,
        rdzv_endpoint=slot.rdzv_endpoint,
        rdzv_id=_rdzv_id(slot.trial_id, slot.attempt),
        agents=tuple(str(n) for _, n in gang),
        model=dict(session.get_one(SpecRow, search.model_spec_id).body),
        cluster=dict(session.get_one(SpecRow, search.cluster_spec_id).body),
        model_factory=search.model_factory,
    )


def get_trial_in(session: Session, row: TrialRow) -> d.Trial:
    """The trial with its measurement (inside the caller's transaction)."""
    meas = session.scalars(select(MeasurementRow).where(MeasurementRow.trial_id == row.id)).one_or_none()
    return convert.trial(row, meas)


def _match(nodes: list[dict[str, Any]], idle: list[AgentRow], me: AgentRow) -> list[AgentRow] | None:
    """One idle agent per node (same device type, enough GPUs): the caller on the first node it
    fits, else the agent named like the node, else the first that fits; None if the pool cannot
    field the gang now or the caller is not in it."""
    free = list(idle)
    out: list[AgentRow] = []
    for node in nodes:
        fits = [a for a in free if a.device.get("name") == node["device"] and a.gpus >= int(node["gpus"])]
        if not fits:
            return None
        placed = any(a.id == me.id for a in out)
        pick = (None if placed else next((a for a in fits if a.id == me.id), None)) or next(
            (a for a in fits if a.name == node["name"]), fits[0]
        )
        out.append(pick)
        free.remove(pick)
    return out if any(a.id == me.id for a in out) else None


def claim_slot(session: Session, *, agent: str, live_s: float) -> SlotClaim | None:
    """The caller's current slot (marked joined), or a new gang with the caller in it, or None."""
    for _ in range(8):
        now = utcnow()
        try:
            with session.begin():
                me = session.scalars(select(AgentRow).where(AgentRow.name == agent)).one_or_none()
                if me is None:
                    raise d.NotFound(f"no agent {agent!r}: register first")
                session.execute(update(AgentRow).where(AgentRow.id == me.id).values(last_seen_at=now))
                if me.slot_id is not None:
                    slot = session.get_one(GangSlotRow, me.slot_id)
                    if slot.state == "assigned":
                        slot.state, slot.heartbeat_at = "joined", now
                    return _claim_of(session, slot) if slot.state in OPEN else None
                got = _form_gang(session, me, now, live_s)
                if got is None:
                    return None
                return _claim_of(session, got)
        except _Lost:
            continue
    return None


def _locked(session: Session, query: Select[Any]) -> int:
    """How many of ``query``'s rows this transaction could lock now (all of them on SQLite)."""
    return len(session.execute(query.with_for_update(skip_locked=True)).all())


def _form_gang(session: Session, me: AgentRow, now: datetime, live_s: float) -> GangSlotRow | None:
    specs = pool_spec_ids(session, me.pool)
    if not specs:
        return None
    queued = session.execute(
        select(TrialRow.id, SpecRow.body)
        .join(SearchRow, SearchRow.id == TrialRow.search_id)
        .join(SpecRow, SpecRow.id == SearchRow.cluster_spec_id)
        .where(TrialRow.state == "queued", SearchRow.cluster_spec_id.in_(specs))
        .order_by(TrialRow.id)
        .limit(8)
    ).all()
    if not queued:
        return None
    idle = list(
        session.scalars(
            select(AgentRow)
            .where(
                AgentRow.pool == me.pool,
                AgentRow.slot_id.is_(None),
                AgentRow.last_seen_at >= now - timedelta(seconds=live_s),
            )
            .order_by(AgentRow.id)
        )
    )
    if not any(a.id == me.id for a in idle):
        return None
    for trial_id, body in queued:
        nodes = list(body["nodes"])
        gang = _match(nodes, idle, me)
        if gang is None:
            continue
        # PostgreSQL: lock exactly this trial and these agents, never waiting (SKIP LOCKED): a
        # row another claimer holds means this gang is not available now (no deadlock possible).
        if _locked(session, select(TrialRow.id).where(TrialRow.id == trial_id)) != 1:
            continue
        ids = sorted(a.id for a in gang)
        if _locked(session, select(AgentRow.id).where(AgentRow.id.in_(ids))) != len(ids):
            raise _Lost
        token = secrets.token_hex(16)
        won = session.execute(
            update(TrialRow)
            .where(TrialRow.id == trial_id, TrialRow.state == "queued")
            .values(
                state="running",
                attempt=TrialRow.attempt + 1,
                claim_token=token,
                claimed_by=f"gang:{','.join(a.name for a in gang)}",
                heartbeat_at=now,
                started_at=now,
            )
        )
        if affected(won) != 1:
            raise _Lost
        attempt = session.execute(select(TrialRow.attempt).where(TrialRow.id == trial_id)).scalar_one()
        endpoint = f"{gang[0].host}:{gang[0].rdzv_port}"
        mine: GangSlotRow | None = None
        for rank, a in enumerate(gang):
            slot = GangSlotRow(trial_id=trial_id, attempt=attempt, node_rank=rank, nnodes=len(gang),
                               agent_id=a.id, claim_token=token, rdzv_endpoint=endpoint,
                               state="joined" if a.id == me.id else "assigned",
                               created_at=now, heartbeat_at=now if a.id == me.id else None)  # fmt: skip
            session.add(slot)
            session.flush()
            took = session.execute(
                update(AgentRow)
                .where(AgentRow.id == a.id, AgentRow.slot_id.is_(None))
                .values(slot_id=slot.id)
            )
            if affected(took) != 1:
                raise _Lost
            if a.id == me.id:
                mine = slot
        return mine
    return None


def slot_heartbeat(session: Session, *, slot_id: int, claim_token: str) -> SlotAck:
    """Refresh a slot; ``accepted=False`` when its attempt is no longer the trial's running one."""
    now = utcnow()
    with session.begin():
        slot = session.get(GangSlotRow, slot_id)
        if slot is None:
            raise d.NotFound(f"no gang slot {slot_id}")
        if slot.claim_token != claim_token:
            raise d.NotFound(f"no gang slot {slot_id} with that claim token")
        trial = session.get_one(TrialRow, slot.trial_id)
        current = trial.state == "running" and trial.attempt == slot.attempt and slot.state != "released"
        states = list(
            session.scalars(
                select(GangSlotRow.state).where(
                    GangSlotRow.trial_id == slot.trial_id, GangSlotRow.attempt == slot.attempt
                )
            )
        )
        done = sum(1 for s in states if s == "done")
        if not current:
            return SlotAck(accepted=False, stop=False, nnodes=slot.nnodes, done=done)
        if slot.state in OPEN:
            slot.state, slot.heartbeat_at = "joined", now
        trial.heartbeat_at = now
        session.execute(update(AgentRow).where(AgentRow.id == slot.agent_id).values(last_seen_at=now))
        return SlotAck(accepted=True, stop=bool(trial.stop_requested), nnodes=slot.nnodes, done=done)


def slot_done(
    session: Session, *, slot_id: int, claim_token: str, exit_code: int, reason: str | None
) -> None:
    """The slot's ranks ended (``exit_code`` of its torchrun); the agent is free again. Idempotent."""
    now = utcnow()
    with session.begin():
        slot = session.get(GangSlotRow, slot_id)
        if slot is None or slot.claim_token != claim_token:
            raise d.NotFound(f"no gang slot {slot_id} with that claim token")
        session.execute(
            update(GangSlotRow)
            .where(GangSlotRow.id == slot_id, GangSlotRow.state.in_(OPEN))
            .values(state="done", exit_code=exit_code, reason=reason, finished_at=now, heartbeat_at=now)
        )
        session.execute(update(AgentRow).where(AgentRow.slot_id == slot_id).values(slot_id=None))


def _abandon_reason(slots: list[GangSlotRow], names: dict[int, str], trial: TrialRow, now: datetime,
                    timeout_s: float, join_timeout_s: float) -> str | None:  # fmt: skip
    for s in slots:
        who = f"node {s.node_rank} (agent {names.get(s.agent_id, '?')})"
        if s.state == "released":
            return f"{who} left the gang: {s.reason or 'released'}"
        if s.state == "assigned" and (now - aware(s.created_at)).total_seconds() > join_timeout_s:
            return f"{who} did not join within {join_timeout_s:g} s"
        beat = maybe_aware(s.heartbeat_at)
        if s.state == "joined" and beat is not None and (now - beat).total_seconds() > timeout_s:
            return f"{who} silent for {(now - beat).total_seconds():.1f} s"
    beat = maybe_aware(trial.heartbeat_at)
    if (
        all(s.state == "done" for s in slots)
        and beat is not None
        and (now - beat).total_seconds() > timeout_s
    ):
        return "every node finished but no measurement was reported"
    return None


def release_stale_gangs(
    session: Session,
    *,
    timeout_s: float,
    join_timeout_s: float,
    max_attempts: int = 5,
    now: datetime | None = None,
) -> list[tuple[int, str]]:
    """Abandon stale gang attempts (module doc); returns (trial id, reason) of those requeued or failed."""
    now = now or utcnow()
    out: list[tuple[int, str]] = []
    with session.begin():
        open_slots = session.execute(
            select(GangSlotRow.trial_id, GangSlotRow.attempt).where(GangSlotRow.state.in_(OPEN))
        ).all()
        left = session.execute(  # a released slot of a still-running attempt: abandon it now
            select(GangSlotRow.trial_id, GangSlotRow.attempt)
            .join(TrialRow, TrialRow.id == GangSlotRow.trial_id)
            .where(
                GangSlotRow.state == "released",
                TrialRow.state == "running",
                TrialRow.attempt == GangSlotRow.attempt,
            )
        ).all()
        attempts = sorted({(int(t), int(a)) for t, a in [*open_slots, *left]})
        names = {int(i): str(n) for i, n in session.execute(select(AgentRow.id, AgentRow.name))}
        for trial_id, attempt in attempts:
            trial = session.get_one(TrialRow, trial_id)
            slots = list(
                session.scalars(
                    select(GangSlotRow).where(
                        GangSlotRow.trial_id == trial_id, GangSlotRow.attempt == attempt
                    )
                )
            )
            live_attempt = trial.state == "running" and trial.attempt == attempt
            reason = _abandon_reason(slots, names, trial, now, timeout_s, join_timeout_s)
            if live_attempt and reason is None:
                continue
            if live_attempt and reason is not None:
                values: dict[str, object]
                if trial.stop_requested:
                    values = {"state": "cancelled", "failure_reason": "search cancelled", "finished_at": now}
                elif attempt >= max_attempts:
                    values = {"state": "failed", "finished_at": now,
                              "failure_reason": f"gang lost on {attempt} attempts (last: {reason})"}  # fmt: skip
                else:
                    values = {
                        "state": "queued",
                        "claim_token": None,
                        "claimed_by": None,
                        "heartbeat_at": None,
                    }
                done = session.execute(
                    update(TrialRow)
                    .where(TrialRow.id == trial_id, TrialRow.state == "running", TrialRow.attempt == attempt)
                    .values(**values)
                )
                if affected(done) == 1:
                    out.append((trial_id, reason))
            # A stale attempt (abandoned now, or the trial finished / requeued elsewhere): close
            # its open slots, free their agents.
            ids = [s.id for s in slots if s.state in OPEN]
            if ids:
                session.execute(
                    update(GangSlotRow)
                    .where(GangSlotRow.id.in_(ids), GangSlotRow.state.in_(OPEN))
                    .values(state="released", reason=reason or "attempt over", finished_at=now)
                )
            freed = [s.id for s in slots if s.state != "done"]
            if freed:
                session.execute(update(AgentRow).where(AgentRow.slot_id.in_(freed)).values(slot_id=None))
    return out
