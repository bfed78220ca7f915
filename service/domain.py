"""Domain objects of the service: what the data-access layer returns and the loop and API consume.

They are frozen dataclasses, detached from the database: holding one never keeps a session or a
transaction open, and changing the database never changes one already returned. JSON documents
(specs, strategies, measurements) are plain dicts/tuples exactly as stored; parse them with the
helpers here (`SpecRecord.model_spec()`, `Candidate.strategy_spec()`, ...) when a typed spec is
needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from simulator.spec import ClusterSpec, ModelSpec, Strategy, domain_name, wire
from simulator.spec.io import parse_as
from simulator.spec.measurement import Measurement
from simulator.spec.profile import Profile
from simulator.spec.wire import HeartbeatAck as HeartbeatAck  # the repository's answer to a heartbeat

if TYPE_CHECKING:
    from search.space import Compression, SpaceKind
    from search.speedup import FamilyResult, SpaceReport

Role = Literal["user", "worker", "admin"]
ROLES: tuple[Role, ...] = ("user", "worker", "admin")

SpecKind = Literal["model", "cluster"]
Objective = Literal["time", "cost"]
#: What a search plans (migration 0007; ``service.plans`` dispatches on it).
PlanKindName = Literal["sync", "pipeline", "hybrid", "heterogeneous"]

SearchState = Literal["pending", "running", "awaiting_approval", "completed", "cancelled", "failed"]
SEARCH_STATES: tuple[SearchState, ...] = (
    "pending",
    "running",
    "awaiting_approval",
    "completed",
    "cancelled",
    "failed",
)
#: A search in one of these states never changes state again.
SEARCH_FINAL: frozenset[str] = frozenset({"completed", "cancelled", "failed"})

RoundState = Literal["proposed", "awaiting_approval", "running", "completed", "cancelled"]
CandidateStatus = Literal["proposed", "approved", "rejected"]

TrialState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
TRIAL_STATES: tuple[TrialState, ...] = ("queued", "running", "succeeded", "failed", "cancelled")
#: A trial in one of these states is finished and is never modified again.
TRIAL_FINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})

RuntimeSource = Literal["trial", "user"]
RetrainState = Literal["pending", "running", "done", "failed"]


@dataclass(frozen=True)
class Principal:
    """The caller of an API request, resolved from its bearer token."""

    user_id: int
    name: str
    role: Role
    token_id: int


@dataclass(frozen=True)
class TokenInfo:
    """A stored API token, without its secret (only the prefix is kept in clear)."""

    id: int
    prefix: str
    user_id: int
    name: str
    role: Role
    created_at: datetime
    revoked: bool


@dataclass(frozen=True)
class IssuedToken:
    """A token just created: ``secret`` is shown once and never stored (only its sha256 is)."""

    secret: str
    info: TokenInfo


@dataclass(frozen=True)
class SpecRecord:
    """An uploaded (or zoo) model or cluster spec; ``owner_id`` is None for the zoo."""

    id: int
    kind: SpecKind
    name: str
    owner_id: int | None
    origin: Literal["upload", "zoo"]
    body: dict[str, Any]
    created_at: datetime

    def model_spec(self) -> ModelSpec:
        return parse_as(ModelSpec, self.body)

    def cluster_spec(self) -> ClusterSpec:
        return parse_as(ClusterSpec, self.body)


@dataclass(frozen=True)
class Search:
    """One strategy search of a model on a cluster, as stored."""

    id: int
    owner_id: int
    name: str
    model_spec_id: int
    cluster_spec_id: int
    model_name: str
    cluster_name: str
    objective: Objective
    trial_budget: int
    candidates_per_round: int
    samples_per_round: int
    approval_required: bool
    seed: int
    state: SearchState
    current_round: int
    failure_reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    # Compressors on offer ('none': lossless, the default; see search.space.Compression).
    compression: Compression = "none"
    # What it plans ('sync': AutoSync strategies) and that kind's validated options (None for sync).
    plan_kind: PlanKindName = "sync"
    plan_options: dict[str, Any] | None = None
    # The user's own model ('module:function', migration 0012); None: the ModelSpec's layers.
    model_factory: str | None = None

    @property
    def space(self) -> SpaceKind:
        """'lossless' or 'lossy': the space the search's candidates come from."""
        from search.space import space_kind  # lazy: importing search costs the CLI ~0.7 s

        return space_kind(self.compression)

    @property
    def domain(self) -> str:
        return domain_name(self.model_name, self.cluster_name)


@dataclass(frozen=True)
class Round:
    """One sample → score → select round of a search (``index`` counts from 1)."""

    id: int
    search_id: int
    index: int
    state: RoundState
    simulator_version_id: int | None
    simulator_kind: str
    samples: int
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class Candidate:
    """A selected strategy of a round with its predicted time, rank and similarity to the other picks."""

    id: int
    search_id: int
    round_id: int
    round_index: int
    rank: int
    strategy: dict[str, Any]
    predicted_time: float
    similarity: float
    status: CandidateStatus
    decided_at: datetime | None
    scorer: str = "analytical"  # which scorer ranked it: analytical, learned, hybrid, a network kind
    uncertainty: float | None = None  # the scorer's uncertainty (hybrid/learned: ensemble disagreement)

    def strategy_spec(self) -> Strategy:
        return parse_as(Strategy, self.strategy)


@dataclass(frozen=True)
class CandidateDraft:
    """What the loop hands to `add_round` for each pick (the database assigns the ids)."""

    rank: int
    strategy: dict[str, Any]
    predicted_time: float
    similarity: float
    scorer: str = "analytical"  # which scorer ranked it (search.round.RoundResult.scorers)
    uncertainty: float | None = None  # its uncertainty (RoundResult.uncertainty)


@dataclass(frozen=True)
class Trial:
    """One run of a candidate (or a baseline) on a worker and, when finished, what it measured."""

    id: int
    search_id: int
    round_index: int | None
    candidate_id: int | None
    baseline: str | None
    cluster_name: str
    strategy: dict[str, Any]
    predicted_time: float | None
    state: TrialState
    attempt: int
    claimed_by: str | None
    heartbeat_at: datetime | None
    stop_requested: bool
    failure_reason: str | None
    iteration_times: tuple[float, ...]
    median_time: float | None
    measurement: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def label(self) -> str:
        """``'baseline:<name>'`` or ``'candidate:<id>'``."""
        return f"baseline:{self.baseline}" if self.baseline else f"candidate:{self.candidate_id}"

    def measurement_spec(self) -> Measurement | None:
        return None if self.measurement is None else Measurement.model_validate(self.measurement)


#: A trial handed to one worker (``simulator.spec.wire.TrialClaim`` around the domain ``Trial``):
#: the claim token and attempt it must heartbeat and report with, and the model and cluster specs.
TrialClaim = wire.TrialClaim[Trial]
#: The trial after a report (``simulator.spec.wire.ReportAck``); ``recorded`` is False for a
#: duplicate or stale report (a no-op).
ReportOutcome = wire.ReportAck[Trial]


@dataclass(frozen=True)
class BaselineResult:
    """A baseline's measured median time (None until its trial succeeded)."""

    name: str
    trial_id: int
    state: TrialState
    median_time: float | None


@dataclass(frozen=True)
class SearchStatus:
    """A search's progress: trial counts, the best measured candidate and its speed-ups."""

    search: Search
    trials_by_state: dict[str, int]
    candidate_trials_done: int
    best_trial_id: int | None
    best_candidate_id: int | None
    best_time: float | None
    baselines: tuple[BaselineResult, ...]
    #: baseline family → its tuned median / the best same-space candidate's median (> 1: beaten).
    speedups: dict[str, float] = field(default_factory=dict)
    #: baseline families as measured (tuned = fastest member) and the per-space honest reports.
    families: tuple[FamilyResult, ...] = ()
    reports: tuple[SpaceReport, ...] = ()


@dataclass(frozen=True)
class RuntimeRecord:
    """A measured runtime of one strategy in one domain: from a trial, or ingested from a user's run."""

    id: int
    domain: str
    model_name: str
    cluster_name: str
    strategy: dict[str, Any]
    iteration_times: tuple[float, ...]
    median_time: float
    source: RuntimeSource
    search_id: int | None
    trial_id: int | None
    user_id: int | None
    created_at: datetime
    # Where it was measured (simulator.spec.measurement.MeasuredOn as JSON); None: not recorded.
    measured_on: dict[str, Any] | None = None

    def strategy_spec(self) -> Strategy:
        return parse_as(Strategy, self.strategy)


@dataclass(frozen=True)
class SimulatorVersion:
    """A trained simulator for one domain: its kind (analytical, rnn, gat, ...), file and metrics."""

    id: int
    domain: str
    kind: str
    version: int
    metrics: dict[str, Any]
    path: str | None
    n_records: int
    created_at: datetime


@dataclass(frozen=True)
class RetrainRequest:
    """A request to retrain a domain's simulator; the loop picks up pending ones."""

    id: int
    domain: str
    state: RetrainState
    requested_by: int | None
    simulator_version_id: int | None
    error: str | None
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class WorkerInfo:
    """A worker as last seen: its pool, the clusters it can run, whether it is live, what it runs."""

    id: int
    name: str
    user_id: int | None
    clusters: tuple[str, ...]
    last_seen_at: datetime
    pool: str = ""  # 'testbed' or 'gpu' ('' when it never said)
    live: bool = False  # seen within the liveness window (see service.db.repo_workers)
    current_trial_id: int | None = None  # the running trial it holds, if any


class NotFound(LookupError):
    """The object does not exist, or the caller may not see it (both read as HTTP 404)."""


class Conflict(RuntimeError):
    """The request is valid but not in the object's current state (HTTP 409)."""


class QuotaExceeded(RuntimeError):
    """The caller already holds as much as a per-user limit allows (HTTP 429)."""


@dataclass(frozen=True)
class Usage:
    """What one user holds right now, compared against the per-user quotas in `Settings`."""

    active_searches: int  # searches pending, running or awaiting approval
    queued_trials: int  # trials of their searches waiting for a worker


@dataclass(frozen=True)
class ProfileRecord:
    """A stored measured profile (``simulator.spec.profile.Profile``) and who uploaded it when."""

    id: int
    owner_id: int | None
    created_at: datetime
    profile: Profile


@dataclass(frozen=True)
class ProfileJobRecord:
    """A queued profile job (``service.db.repo_profile_jobs``): what to measure and how it ended."""

    id: int
    model: str
    spec: ModelSpec
    device: str | None
    dtype: str
    batch: int
    repeats: int
    state: str  # 'queued', 'running', 'done' or 'failed'
    worker: str | None
    profile_id: int | None
    error: str | None
    owner_id: int | None
    created_at: datetime
    finished_at: datetime | None
