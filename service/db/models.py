"""ORM tables (SQLAlchemy 2, typed). Rows never leave `service.db`: see `service.db.convert`.

Integrity the database itself enforces (not just the code):
- ``measurements.trial_id`` is UNIQUE: a trial has at most one measurement, whatever number of
  reports, redeliveries or races arrive;
- ``runtime_records.trial_id`` is UNIQUE: a trial feeds the retraining set at most once;
- ``api_tokens.token_hash`` is UNIQUE; ``users.name`` and ``workers.name`` are UNIQUE;
- a trial is either a candidate's or a baseline's (CHECK), and every state column is CHECKed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    """Now, timezone-aware UTC (stored as UTC on both databases)."""
    return datetime.now(UTC)


NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


PLAN_KINDS = ("sync", "pipeline", "hybrid", "heterogeneous")
"""What a search plans: AutoSync strategies, Ada-Grouper pipelines, Whale hybrid plans, HeterPS schedules."""


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: DateTime(timezone=True),
    }


class UserRow(Base):
    __tablename__ = "users"
    __table_args__ = (CheckConstraint(_in("role", ("user", "worker", "admin")), name="role"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TokenRow(Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class SpecRow(Base):
    __tablename__ = "specs"
    __table_args__ = (
        CheckConstraint(_in("kind", ("model", "cluster")), name="kind"),
        CheckConstraint(_in("origin", ("upload", "zoo")), name="origin"),
        Index("ix_specs_kind_name", "kind", "name"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(200))
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    origin: Mapped[str] = mapped_column(String(16))
    body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SearchRow(Base):
    __tablename__ = "searches"
    __table_args__ = (
        CheckConstraint(
            _in("state", ("pending", "running", "awaiting_approval", "completed", "cancelled", "failed")),
            name="state",
        ),
        CheckConstraint(_in("objective", ("time", "cost")), name="objective"),
        CheckConstraint(_in("compression", ("none", "fp16", "powersgd", "all")), name="compression"),
        CheckConstraint(_in("plan_kind", PLAN_KINDS), name="plan_kind"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    model_spec_id: Mapped[int] = mapped_column(ForeignKey("specs.id"))
    cluster_spec_id: Mapped[int] = mapped_column(ForeignKey("specs.id"))
    model_name: Mapped[str] = mapped_column(String(200))
    cluster_name: Mapped[str] = mapped_column(String(200))
    objective: Mapped[str] = mapped_column(String(16))
    trial_budget: Mapped[int]
    candidates_per_round: Mapped[int]
    samples_per_round: Mapped[int]
    approval_required: Mapped[bool] = mapped_column(Boolean)
    seed: Mapped[int] = mapped_column(default=0)
    # Compressors the search may use (search.space.Compression): 'none' = lossless (the default).
    compression: Mapped[str] = mapped_column(String(16), default="none", server_default="none")
    # What the search plans (migration 0007): 'sync' strategies, 'pipeline', 'hybrid' or
    # 'heterogeneous' plans; plan_options holds that kind's options (NULL for 'sync').
    plan_kind: Mapped[str] = mapped_column(String(16), default="sync", server_default="sync")
    plan_options: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    # The user's own model (migration 0012): 'module:function' agent-pool trials run for real.
    model_factory: Mapped[str | None] = mapped_column(String(300), default=None)
    state: Mapped[str] = mapped_column(String(24), index=True)
    current_round: Mapped[int] = mapped_column(default=0)
    failure_reason: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class RoundRow(Base):
    __tablename__ = "rounds"
    __table_args__ = (
        UniqueConstraint("search_id", "index", name="uq_rounds_search_index"),
        CheckConstraint(
            _in("state", ("proposed", "awaiting_approval", "running", "completed", "cancelled")),
            name="state",
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    search_id: Mapped[int] = mapped_column(ForeignKey("searches.id", ondelete="CASCADE"))
    index: Mapped[int]
    state: Mapped[str] = mapped_column(String(24))
    simulator_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("simulator_versions.id", ondelete="SET NULL"), default=None
    )
    simulator_kind: Mapped[str] = mapped_column(String(32), default="analytical")
    samples: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class CandidateRow(Base):
    __tablename__ = "candidates"
    __table_args__ = (
        UniqueConstraint("round_id", "rank", name="uq_candidates_round_rank"),
        CheckConstraint(_in("status", ("proposed", "approved", "rejected")), name="status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    search_id: Mapped[int] = mapped_column(ForeignKey("searches.id", ondelete="CASCADE"), index=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"), index=True)
    round_index: Mapped[int]
    rank: Mapped[int]
    strategy: Mapped[dict[str, Any]]
    predicted_time: Mapped[float] = mapped_column(Float)
    similarity: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))
    decided_at: Mapped[datetime | None] = mapped_column(default=None)
    # Which scorer ranked the candidate and its uncertainty (migration 0004).
    scorer: Mapped[str] = mapped_column(String(32), default="analytical", server_default="analytical")
    uncertainty: Mapped[float | None] = mapped_column(Float, default=None)


class TrialRow(Base):
    __tablename__ = "trials"
    __table_args__ = (
        CheckConstraint(
            _in("state", ("queued", "running", "succeeded", "failed", "cancelled")), name="state"
        ),
        CheckConstraint("(candidate_id IS NULL) <> (baseline IS NULL)", name="candidate_or_baseline"),
        UniqueConstraint("candidate_id", name="uq_trials_candidate_id"),
        UniqueConstraint("search_id", "baseline", name="uq_trials_search_baseline"),
        Index("ix_trials_state_cluster", "state", "cluster_name"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    search_id: Mapped[int] = mapped_column(ForeignKey("searches.id", ondelete="CASCADE"), index=True)
    round_index: Mapped[int | None] = mapped_column(default=None)
    candidate_id: Mapped[int | None] = mapped_column(
        ForeignKey("candidates.id", ondelete="CASCADE"), default=None
    )
    baseline: Mapped[str | None] = mapped_column(String(64), default=None)
    cluster_name: Mapped[str] = mapped_column(String(200))
    strategy: Mapped[dict[str, Any]]
    predicted_time: Mapped[float | None] = mapped_column(Float, default=None)
    state: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(default=0)
    claim_token: Mapped[str | None] = mapped_column(String(64), default=None)
    claimed_by: Mapped[str | None] = mapped_column(String(200), default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)
    stop_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    failure_reason: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class MeasurementRow(Base):
    __tablename__ = "measurements"

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), unique=True)
    attempt: Mapped[int]
    worker: Mapped[str | None] = mapped_column(String(200), default=None)
    iteration_times: Mapped[list[Any]]
    median_time: Mapped[float | None] = mapped_column(Float, default=None)
    failure: Mapped[str | None] = mapped_column(Text, default=None)
    body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RuntimeRecordRow(Base):
    __tablename__ = "runtime_records"
    __table_args__ = (CheckConstraint(_in("source", ("trial", "user")), name="source"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    domain: Mapped[str] = mapped_column(String(401), index=True)
    model_name: Mapped[str] = mapped_column(String(200))
    cluster_name: Mapped[str] = mapped_column(String(200))
    strategy: Mapped[dict[str, Any]]
    iteration_times: Mapped[list[Any]]
    median_time: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(16))
    search_id: Mapped[int | None] = mapped_column(
        ForeignKey("searches.id", ondelete="SET NULL"), default=None, index=True
    )
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("trials.id", ondelete="SET NULL"), default=None, unique=True
    )
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), default=None)
    # Where it was measured (migration 0012; simulator.spec.measurement.MeasuredOn), NULL if unknown.
    measured_on: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SimulatorVersionRow(Base):
    __tablename__ = "simulator_versions"
    __table_args__ = (UniqueConstraint("domain", "kind", "version", name="uq_simulator_versions_dkv"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    domain: Mapped[str] = mapped_column(String(401), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    version: Mapped[int]
    metrics: Mapped[dict[str, Any]]
    path: Mapped[str | None] = mapped_column(Text, default=None)
    n_records: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RetrainRequestRow(Base):
    __tablename__ = "retrain_requests"
    __table_args__ = (CheckConstraint(_in("state", ("pending", "running", "done", "failed")), name="state"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    domain: Mapped[str] = mapped_column(String(401), index=True)
    state: Mapped[str] = mapped_column(String(16))
    requested_by: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    simulator_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("simulator_versions.id", ondelete="SET NULL"), default=None
    )
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class WorkerRow(Base):
    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), default=None)
    clusters: Mapped[list[Any]]
    # 'testbed' or 'gpu' as the worker advertised it ('' from workers older than migration 0005).
    pool: Mapped[str] = mapped_column(String(64), default="", server_default="")
    # Refreshed by every claim poll (idle) and every trial heartbeat (busy): the worker's liveness.
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProfileRow(Base):
    """A measured per-layer compute profile (issue 15); the newest row per key is the one used."""

    __tablename__ = "profiles"
    __table_args__ = (Index("ix_profiles_key", "model", "device", "dtype", "batch"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(200))
    device: Mapped[str] = mapped_column(String(200))
    dtype: Mapped[str] = mapped_column(String(16))
    batch: Mapped[int]
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), default=None)
    body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


PROFILE_JOB_STATES = ("queued", "running", "done", "failed")


class ProfileJobRow(Base):
    """A queued request to profile a model on a GPU-pool worker (issue 15, migration 0008)."""

    __tablename__ = "profile_jobs"
    __table_args__ = (
        CheckConstraint(_in("state", PROFILE_JOB_STATES), name="state"),
        Index("ix_profile_jobs_state", "state", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(200))
    # The ModelSpec JSON as resolved when queued (the worker measures exactly this spec).
    spec: Mapped[dict[str, Any]]
    # DeviceType name to key the profile by; None: the worker's device name.
    device: Mapped[str | None] = mapped_column(String(200), default=None)
    dtype: Mapped[str] = mapped_column(String(16))
    batch: Mapped[int]
    repeats: Mapped[int]
    state: Mapped[str] = mapped_column(String(16), default="queued")
    worker: Mapped[str | None] = mapped_column(String(200), default=None)
    claimed_at: Mapped[datetime | None] = mapped_column(default=None)
    profile_id: Mapped[int | None] = mapped_column(
        ForeignKey("profiles.id", ondelete="SET NULL"), default=None
    )
    error: Mapped[str | None] = mapped_column(Text, default=None)
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


SLOT_STATES = ("assigned", "joined", "done", "released")


class AgentRow(Base):
    """A node agent (issue 41, migration 0011): one node of a pool, the GPUs it measured, its NIC.

    ``slot_id`` is the gang slot it holds now (NULL: idle); it is only ever set by a conditional
    ``UPDATE ... WHERE slot_id IS NULL``, so an agent never holds two slots.
    """

    __tablename__ = "agents"
    __table_args__ = (Index("ix_agents_pool", "pool", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    pool: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(200))
    rdzv_port: Mapped[int]
    nic: Mapped[str] = mapped_column(String(64), default="")
    nic_gbps: Mapped[float] = mapped_column(Float)
    intra_gbps: Mapped[float] = mapped_column(Float)
    # The DeviceType JSON of its GPUs (name, TFLOPS, memory as measured or configured) and count.
    device: Mapped[dict[str, Any]]
    gpus: Mapped[int]
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), default=None)
    slot_id: Mapped[int | None] = mapped_column(default=None)
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class GangSlotRow(Base):
    """One node of one trial attempt, held by one agent (issue 41): the gang is every slot of an attempt."""

    __tablename__ = "gang_slots"
    __table_args__ = (
        UniqueConstraint("trial_id", "attempt", "node_rank", name="uq_gang_slots_trial_attempt_rank"),
        CheckConstraint(_in("state", SLOT_STATES), name="state"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int]
    node_rank: Mapped[int]
    nnodes: Mapped[int]
    agent_id: Mapped[int] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    # The trial's claim token of this attempt: heartbeats and 'done' of a slot must carry it.
    claim_token: Mapped[str] = mapped_column(String(64))
    rdzv_endpoint: Mapped[str] = mapped_column(String(260))
    state: Mapped[str] = mapped_column(String(16), default="assigned")
    exit_code: Mapped[int | None] = mapped_column(default=None)
    reason: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)


class PoolSpecRow(Base):
    """A cluster spec stored from a pool of agents: trials of searches on it go to that pool."""

    __tablename__ = "pool_specs"

    id: Mapped[int] = mapped_column(primary_key=True)
    pool: Mapped[str] = mapped_column(String(64), index=True)
    spec_id: Mapped[int] = mapped_column(ForeignKey("specs.id", ondelete="CASCADE"), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
