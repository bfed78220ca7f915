"""What a heterogeneous search found: every evaluated plan's money, throughput and provisioning, and the front.

An *evaluated plan* is a candidate (with its trial, if it has one) or a baseline trial. Each has
the cost model's prediction (money, throughput, per-stage units and throughputs: the document,
``runtime.worker.plan_heterogeneous.HeterogeneousPlan``) and, once its trial succeeded, what the
testbed measured (``Measurement.details``: throughput, money with Formula 8 at the measured
throughput, per-stage periods).

**The front.** A plan is on the money vs throughput front when no other plan is at least as fast
and at most as expensive, one of them strictly; measured plans are compared by their measured
figures (``on_measured_front``), every plan by its predicted ones (``on_predicted_front``).

**The best plan** is the cheapest *measured* plan whose measured throughput meets the limit (the
question the search answers: the least money that trains fast enough); ``cheapest_predicted`` is
the cheapest plan the cost model says meets it. ``savings`` compares the best with each measured
baseline: baseline money / best money (> 1: the search's plan is cheaper).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.orm import Session

from runtime.worker.plan_heterogeneous import DOC_KIND, HeterogeneousPlan
from service.db import repository as repo
from service.domain import Candidate, Conflict, Search, SearchStatus, Trial


@dataclass(frozen=True)
class EvaluatedPlan:
    """One plan of the search: its prediction and, when its trial succeeded, its measurement."""

    label: str  # 'candidate:<id>' or 'baseline:<name>'
    candidate_id: int | None
    trial_id: int | None
    baseline: str | None
    round_index: int | None
    rank: int | None
    state: str  # the trial's state, or the candidate's status when it has no trial
    document: HeterogeneousPlan
    measured_throughput: float | None = None
    measured_money: float | None = None
    measured_stages: tuple[dict[str, Any], ...] = ()
    failure: str | None = None
    on_predicted_front: bool = False
    on_measured_front: bool = False

    @property
    def measured(self) -> bool:
        return self.measured_throughput is not None

    @property
    def meets_limit(self) -> bool:
        """Measured throughput >= the limit when measured, else the predicted one."""
        limit = self.document.throughput_limit
        if self.measured_throughput is not None:
            return self.measured_throughput >= limit
        return self.document.predicted.throughput >= limit * (1 - 1e-9)


@dataclass(frozen=True)
class HeterogeneousResults:
    """A heterogeneous search's plans, its best measured plan, and the money saved over each baseline."""

    throughput_limit: float
    scheduler: str
    plans: tuple[EvaluatedPlan, ...]
    best: EvaluatedPlan | None
    cheapest_predicted: EvaluatedPlan | None
    savings: dict[str, float] = field(default_factory=dict)


def front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For (throughput, money) points: True where no other point dominates (faster-or-equal and
    cheaper-or-equal, one strictly)."""
    out = []
    for i, (t, m) in enumerate(points):
        dominated = any(
            t2 >= t and m2 <= m and (t2 > t or m2 < m) for j, (t2, m2) in enumerate(points) if j != i
        )
        out.append(not dominated)
    return out


def _measured(trial: Trial | None) -> tuple[float | None, float | None, tuple[dict[str, Any], ...]]:
    if trial is None or trial.state != "succeeded" or not trial.measurement:
        return None, None, ()
    details = trial.measurement.get("details") or {}
    thr = details.get("throughput")
    money = details.get("money")
    if not isinstance(thr, int | float) or thr <= 0:
        return None, None, ()
    stages = tuple(s for s in details.get("stages") or () if isinstance(s, dict))
    return float(thr), float(money) if isinstance(money, int | float) else None, stages


def results(search: Search, candidates: Sequence[Candidate], trials: Sequence[Trial]) -> HeterogeneousResults:
    """The search's evaluated plans (candidates by round and rank, then baselines) with fronts and best."""
    options = search.plan_options or {}
    by_candidate = {t.candidate_id: t for t in trials if t.candidate_id is not None}
    rows: list[EvaluatedPlan] = []
    for c in candidates:
        if c.strategy.get("kind") != DOC_KIND:
            continue
        t = by_candidate.get(c.id)
        thr, money, stages = _measured(t)
        rows.append(
            EvaluatedPlan(
                label=f"candidate:{c.id}",
                candidate_id=c.id,
                trial_id=t.id if t else None,
                baseline=None,
                round_index=c.round_index,
                rank=c.rank,
                state=t.state if t else c.status,
                document=HeterogeneousPlan.model_validate(c.strategy),
                measured_throughput=thr,
                measured_money=money,
                measured_stages=stages,
                failure=t.failure_reason if t else None,
            )
        )
    for t in trials:
        if t.baseline is None or t.strategy.get("kind") != DOC_KIND:
            continue
        thr, money, stages = _measured(t)
        rows.append(
            EvaluatedPlan(
                label=f"baseline:{t.baseline}",
                candidate_id=None,
                trial_id=t.id,
                baseline=t.baseline,
                round_index=None,
                rank=None,
                state=t.state,
                document=HeterogeneousPlan.model_validate(t.strategy),
                measured_throughput=thr,
                measured_money=money,
                measured_stages=stages,
                failure=t.failure_reason,
            )
        )
    predicted = front([(p.document.predicted.throughput, p.document.predicted.money) for p in rows])
    measured_rows = [i for i, p in enumerate(rows) if p.measured and p.measured_money is not None]
    measured_front = front(
        [(rows[i].measured_throughput or 0.0, rows[i].measured_money or 0.0) for i in measured_rows]
    )
    on_measured = {i for i, ok in zip(measured_rows, measured_front, strict=True) if ok}
    rows = [
        _with(p, on_predicted_front=predicted[i], on_measured_front=i in on_measured)
        for i, p in enumerate(rows)
    ]
    meeting = [p for p in rows if p.measured and p.measured_money is not None and p.meets_limit]
    best = min(meeting, key=lambda p: (p.measured_money, p.label), default=None)
    feasible = [
        p for p in rows if p.document.predicted.throughput >= p.document.throughput_limit * (1 - 1e-9)
    ]
    cheapest = min(feasible, key=lambda p: (p.document.predicted.money, p.label), default=None)
    savings = {}
    if best is not None and best.measured_money:
        for p in rows:
            if p.baseline is not None and p.measured_money is not None:
                savings[p.baseline] = p.measured_money / best.measured_money
    return HeterogeneousResults(
        throughput_limit=float(options.get("throughput_limit", 0.0)),
        scheduler=str(options.get("scheduler", "")),
        plans=tuple(rows),
        best=best,
        cheapest_predicted=cheapest,
        savings=savings,
    )


def load_results(session: Session, *, search_id: int, owner_id: int | None = None) -> HeterogeneousResults:
    """The results of a stored heterogeneous search; NotFound if not the owner's, Conflict if another kind."""
    search = repo.get_search(session, search_id=search_id, owner_id=owner_id)
    if search.plan_kind != "heterogeneous":
        raise Conflict(
            f"search {search_id} plans {search.plan_kind!r}; money and throughput per plan are the results"
            " of a heterogeneous (cost-objective) search"
        )
    candidates = repo.list_candidates(session, search_id=search_id)
    trials = repo.list_trials(session, search_id=search_id)
    return results(search, candidates, trials)


def _with(p: EvaluatedPlan, **changes: Any) -> EvaluatedPlan:
    return replace(p, **changes)


def cheapest_as_best(session: Session, status: SearchStatus, *, owner_id: int | None = None) -> SearchStatus:
    """A heterogeneous search's status whose best is the cheapest measured candidate meeting the limit.

    The generic best is the fastest candidate (``repo.search_status``), which under a cost objective
    with a throughput limit is the most expensive one tried; this is the candidate the search
    answers with. Other kinds' statuses are returned unchanged.
    """
    if status.search.plan_kind != "heterogeneous":
        return status
    r = load_results(session, search_id=status.search.id, owner_id=owner_id)
    meeting = [p for p in r.plans if p.candidate_id is not None and p.measured and p.meets_limit]
    best = min(meeting, key=lambda p: (p.measured_money or 0.0, p.label), default=None)
    times = {t.id: t.median_time for t in repo.list_trials(session, search_id=status.search.id)}
    return replace(
        status,
        best_trial_id=best.trial_id if best else None,
        best_candidate_id=best.candidate_id if best else None,
        best_time=times.get(best.trial_id) if best and best.trial_id else None,
    )
