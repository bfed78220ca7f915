"""ORM row → domain object conversions; the only place rows become something the rest can hold."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from service import domain as d
from service.db import models as m

if TYPE_CHECKING:
    from search.space import Compression


def aware(t: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything stored is UTC, so mark it so."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def maybe_aware(t: datetime | None) -> datetime | None:
    return None if t is None else aware(t)


def token_info(tok: m.TokenRow, user: m.UserRow) -> d.TokenInfo:
    return d.TokenInfo(
        id=tok.id,
        prefix=tok.prefix,
        user_id=user.id,
        name=user.name,
        role=cast(d.Role, user.role),
        created_at=aware(tok.created_at),
        revoked=tok.revoked_at is not None,
    )


def spec(row: m.SpecRow) -> d.SpecRecord:
    return d.SpecRecord(
        id=row.id,
        kind=cast(d.SpecKind, row.kind),
        name=row.name,
        owner_id=row.owner_id,
        origin=cast(Any, row.origin),
        body=dict(row.body),
        created_at=aware(row.created_at),
    )


def search(row: m.SearchRow) -> d.Search:
    return d.Search(
        id=row.id,
        owner_id=row.owner_id,
        name=row.name,
        model_spec_id=row.model_spec_id,
        cluster_spec_id=row.cluster_spec_id,
        model_name=row.model_name,
        cluster_name=row.cluster_name,
        objective=cast(d.Objective, row.objective),
        trial_budget=row.trial_budget,
        candidates_per_round=row.candidates_per_round,
        samples_per_round=row.samples_per_round,
        approval_required=row.approval_required,
        seed=row.seed,
        compression=cast("Compression", row.compression),
        plan_kind=cast(d.PlanKindName, row.plan_kind),
        plan_options=None if row.plan_options is None else dict(row.plan_options),
        model_factory=row.model_factory,
        state=cast(d.SearchState, row.state),
        current_round=row.current_round,
        failure_reason=row.failure_reason,
        created_at=aware(row.created_at),
        updated_at=aware(row.updated_at),
        finished_at=maybe_aware(row.finished_at),
    )


def round_(row: m.RoundRow) -> d.Round:
    return d.Round(
        id=row.id,
        search_id=row.search_id,
        index=row.index,
        state=cast(d.RoundState, row.state),
        simulator_version_id=row.simulator_version_id,
        simulator_kind=row.simulator_kind,
        samples=row.samples,
        created_at=aware(row.created_at),
        finished_at=maybe_aware(row.finished_at),
    )


def candidate(row: m.CandidateRow) -> d.Candidate:
    return d.Candidate(
        id=row.id,
        search_id=row.search_id,
        round_id=row.round_id,
        round_index=row.round_index,
        rank=row.rank,
        strategy=dict(row.strategy),
        predicted_time=row.predicted_time,
        similarity=row.similarity,
        status=cast(d.CandidateStatus, row.status),
        decided_at=maybe_aware(row.decided_at),
        scorer=row.scorer,
        uncertainty=row.uncertainty,
    )


def trial(row: m.TrialRow, meas: m.MeasurementRow | None) -> d.Trial:
    return d.Trial(
        id=row.id,
        search_id=row.search_id,
        round_index=row.round_index,
        candidate_id=row.candidate_id,
        baseline=row.baseline,
        cluster_name=row.cluster_name,
        strategy=dict(row.strategy),
        predicted_time=row.predicted_time,
        state=cast(d.TrialState, row.state),
        attempt=row.attempt,
        claimed_by=row.claimed_by,
        heartbeat_at=maybe_aware(row.heartbeat_at),
        stop_requested=row.stop_requested,
        failure_reason=row.failure_reason,
        iteration_times=tuple(float(t) for t in meas.iteration_times) if meas else (),
        median_time=meas.median_time if meas else None,
        measurement=dict(meas.body) if meas else None,
        created_at=aware(row.created_at),
        started_at=maybe_aware(row.started_at),
        finished_at=maybe_aware(row.finished_at),
    )


def runtime_record(row: m.RuntimeRecordRow) -> d.RuntimeRecord:
    return d.RuntimeRecord(
        id=row.id,
        domain=row.domain,
        model_name=row.model_name,
        cluster_name=row.cluster_name,
        strategy=dict(row.strategy),
        iteration_times=tuple(float(t) for t in row.iteration_times),
        median_time=row.median_time,
        source=cast(d.RuntimeSource, row.source),
        search_id=row.search_id,
        trial_id=row.trial_id,
        user_id=row.user_id,
        created_at=aware(row.created_at),
        measured_on=None if row.measured_on is None else dict(row.measured_on),
    )


def simulator_version(row: m.SimulatorVersionRow) -> d.SimulatorVersion:
    return d.SimulatorVersion(
        id=row.id,
        domain=row.domain,
        kind=row.kind,
        version=row.version,
        metrics=dict(row.metrics),
        path=row.path,
        n_records=row.n_records,
        created_at=aware(row.created_at),
    )


def retrain_request(row: m.RetrainRequestRow) -> d.RetrainRequest:
    return d.RetrainRequest(
        id=row.id,
        domain=row.domain,
        state=cast(d.RetrainState, row.state),
        requested_by=row.requested_by,
        simulator_version_id=row.simulator_version_id,
        error=row.error,
        created_at=aware(row.created_at),
        finished_at=maybe_aware(row.finished_at),
    )
