"""Data access for searches, their rounds and their candidates.

State rules the functions enforce (a caller cannot break them):
- a search in a final state (completed, cancelled, failed) never changes again;
- an approved candidate always has exactly one trial; approving enqueues it in the same unit of
  work, and a round added to a search that needs no approval has its candidates approved (and
  their trials queued) at once;
- only candidates of a round awaiting approval can be approved or rejected, once.

``owner_id`` arguments restrict to that owner's searches (others read as NotFound); None means
any owner (admins, the loop). Each function is keyword-only, takes a `Session` with no transaction
in progress, runs one ``with session.begin():`` block and returns domain objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from service import domain as d
from service.db import convert
from service.db.engine import affected
from service.db.models import CandidateRow, RoundRow, SearchRow, TrialRow, utcnow
from service.db.paging import keyset

if TYPE_CHECKING:
    from search.space import Compression


def load_search(session: Session, search_id: int, owner_id: int | None, *, lock: bool = False) -> SearchRow:
    """The search row (inside the caller's transaction); NotFound if absent or not the owner's."""
    q = select(SearchRow).where(SearchRow.id == search_id)
    if lock:
        q = q.with_for_update()
    row = session.scalars(q).one_or_none()
    if row is None or (owner_id is not None and row.owner_id != owner_id):
        raise d.NotFound(f"no search {search_id}")
    return row


def open_search_guard(session: Session, search_id: int) -> SearchRow:
    """Re-read a search after this unit of work has written (so under the write lock) and refuse a
    final one: the caller's writes are rolled back with the Conflict.

    Why: SQLite ignores ``FOR UPDATE``, so a state read *before* the first write may be stale; a
    read after it is not (SQLite serialises writers, PostgreSQL holds the row lock).
    """
    row = session.scalars(
        select(SearchRow).where(SearchRow.id == search_id).execution_options(populate_existing=True)
    ).one()
    if row.state in d.SEARCH_FINAL:
        raise d.Conflict(f"search {search_id} is already {row.state}")
    return row


def create_search(
    session: Session,
    *,
    owner_id: int,
    model: d.SpecRecord,
    cluster: d.SpecRecord,
    objective: d.Objective = "time",
    trial_budget: int = 8,
    candidates_per_round: int = 4,
    samples_per_round: int = 200,
    approval_required: bool = False,
    seed: int = 0,
    name: str = "",
    compression: Compression = "none",
    plan_kind: d.PlanKindName = "sync",
    plan_options: dict[str, Any] | None = None,
    model_factory: str | None = None,
) -> d.Search:
    """Store a new search in state 'pending' (the loop starts it); round 0, nothing queued yet.

    ``plan_options`` must already be validated for ``plan_kind`` (``service.plans``)."""
    if model.kind != "model" or cluster.kind != "cluster":
        raise ValueError("model must be a model spec and cluster a cluster spec")
    with session.begin():
        row = SearchRow(
            owner_id=owner_id,
            name=name,
            model_spec_id=model.id,
            cluster_spec_id=cluster.id,
            model_name=model.name,
            cluster_name=cluster.name,
            objective=objective,
            trial_budget=trial_budget,
            candidates_per_round=candidates_per_round,
            samples_per_round=samples_per_round,
            approval_required=approval_required,
            seed=seed,
            compression=compression,
            plan_kind=plan_kind,
            plan_options=plan_options,
            model_factory=model_factory,
            state="pending",
            current_round=0,
        )
        session.add(row)
        session.flush()
        return convert.search(row)


def get_search(session: Session, *, search_id: int, owner_id: int | None = None) -> d.Search:
    """One search; NotFound if it does not exist or belongs to someone else."""
    with session.begin():
        return convert.search(load_search(session, search_id, owner_id))


def list_searches(
    session: Session,
    *,
    owner_id: int | None = None,
    states: Sequence[d.SearchState] | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[d.Search]:
    """Searches of ``owner_id`` (None: everyone's), optionally only in ``states``; newest first."""
    with session.begin():
        q = select(SearchRow)
        if owner_id is not None:
            q = q.where(SearchRow.owner_id == owner_id)
        if states is not None:
            q = q.where(SearchRow.state.in_(list(states)))
        q = keyset(q.order_by(SearchRow.id.desc()), SearchRow.id, after=after, limit=limit, newest_first=True)
        return [convert.search(r) for r in session.scalars(q)]


def transition_search(
    session: Session,
    *,
    search_id: int,
    from_states: Sequence[d.SearchState],
    to_state: d.SearchState,
    failure_reason: str | None = None,
) -> d.Search | None:
    """Move a search to ``to_state`` only if it is in one of ``from_states`` (atomic; None otherwise).

    This is how the loop takes a pending search (pending → running) without two loops both taking
    it, and how it finishes one. Leaving a final state is refused (ValueError).
    """
    if d.SEARCH_FINAL & set(from_states):
        raise ValueError(f"a search in a final state ({sorted(d.SEARCH_FINAL)}) never changes")
    values: dict[str, object] = {"state": to_state, "updated_at": utcnow()}
    if to_state in d.SEARCH_FINAL:
        values["finished_at"] = utcnow()
    if failure_reason is not None:
        values["failure_reason"] = failure_reason
    with session.begin():
        done = session.execute(
            update(SearchRow)
            .where(SearchRow.id == search_id, SearchRow.state.in_(list(from_states)))
            .values(**values)
        )
        if affected(done) != 1:
            return None
        return convert.search(load_search(session, search_id, None))


def cancel_search(session: Session, *, search_id: int, owner_id: int | None = None) -> d.Search:
    """Cancel a search: queued trials → cancelled, running ones flagged to stop, open rounds cancelled.

    Conflict if the search already finished. Running trials stay 'running' until their worker
    reports or their heartbeat goes stale; either way they then end 'cancelled'.
    """
    now = utcnow()
    with session.begin():
        row = load_search(session, search_id, owner_id, lock=True)
        taken = session.execute(
            update(SearchRow)
            .where(SearchRow.id == search_id, SearchRow.state.not_in(sorted(d.SEARCH_FINAL)))
            .values(state="cancelled", finished_at=now, updated_at=now)
        )
        session.refresh(row)
        if affected(taken) != 1:
            raise d.Conflict(f"search {search_id} is already {row.state}")
        session.execute(
            update(TrialRow)
            .where(TrialRow.search_id == search_id, TrialRow.state == "queued")
            .values(state="cancelled", failure_reason="search cancelled", finished_at=now)
        )
        session.execute(
            update(TrialRow)
            .where(TrialRow.search_id == search_id, TrialRow.state == "running")
            .values(stop_requested=True)
        )
        session.execute(
            update(RoundRow)
            .where(RoundRow.search_id == search_id, RoundRow.state.not_in(["completed", "cancelled"]))
            .values(state="cancelled", finished_at=now)
        )
        return convert.search(row)


def new_trial(
    search: SearchRow,
    *,
    strategy: dict[str, object],
    candidate_id: int | None = None,
    baseline: str | None = None,
    round_index: int | None = None,
    predicted_time: float | None = None,
) -> TrialRow:
    """A queued trial row for ``search`` (not yet added to a session)."""
    return TrialRow(
        search_id=search.id,
        candidate_id=candidate_id,
        baseline=baseline,
        round_index=round_index,
        cluster_name=search.cluster_name,
        strategy=strategy,
        predicted_time=predicted_time,
        state="queued",
    )


def add_round(
    session: Session,
    *,
    search_id: int,
    candidates: Sequence[d.CandidateDraft],
    samples: int,
    simulator_kind: str = "analytical",
    simulator_version_id: int | None = None,
    queue_trials: bool = True,
) -> tuple[d.Round, list[d.Candidate]]:
    """Store the next round (index = current_round + 1) with its selected candidates.

    With ``approval_required`` the round and the search wait for approval and the candidates are
    'proposed'; without it the candidates are approved and their trials queued in this same unit of
    work. Conflict if the search is final. Ranks must be distinct (1 = best predicted).

    ``queue_trials=False`` (a predicted-only plan kind, ``PlanKind.predicted_only``): the round is
    stored completed with its candidates 'proposed' and no trial at all, whatever
    ``approval_required`` says (there is nothing to approve: no worker runs such a plan).
    """
    if len({c.rank for c in candidates}) != len(candidates):
        raise ValueError("candidate ranks must be distinct")
    now = utcnow()
    with session.begin():
        search = load_search(session, search_id, None, lock=True)
        if search.state in d.SEARCH_FINAL:
            raise d.Conflict(f"search {search_id} is already {search.state}")
        index = search.current_round + 1
        waiting = queue_trials and search.approval_required and len(candidates) > 0
        # The gate: only one caller moves the search from round index-1 to index, and never a
        # finished search (the read above may be stale on SQLite; this UPDATE is not).
        gate = session.execute(
            update(SearchRow)
            .where(
                SearchRow.id == search_id,
                SearchRow.current_round == index - 1,
                SearchRow.state.not_in(sorted(d.SEARCH_FINAL)),
            )
            .values(current_round=index, state="awaiting_approval" if waiting else "running", updated_at=now)
        )
        if affected(gate) != 1:
            raise d.Conflict(f"search {search_id} changed while adding round {index}; read it again")
        session.refresh(search)
        rnd = RoundRow(
            search_id=search_id,
            index=index,
            state="awaiting_approval" if waiting else "running" if queue_trials else "completed",
            finished_at=None if queue_trials else now,
            simulator_kind=simulator_kind,
            simulator_version_id=simulator_version_id,
            samples=samples,
        )
        session.add(rnd)
        session.flush()
        rows = [
            CandidateRow(
                search_id=search_id,
                round_id=rnd.id,
                round_index=index,
                rank=c.rank,
                strategy=dict(c.strategy),
                predicted_time=float(c.predicted_time),
                similarity=float(c.similarity),
                scorer=c.scorer,
                uncertainty=None if c.uncertainty is None else float(c.uncertainty),
                status="proposed" if waiting or not queue_trials else "approved",
                decided_at=None if waiting or not queue_trials else now,
            )
            for c in sorted(candidates, key=lambda c: c.rank)
        ]
        session.add_all(rows)
        session.flush()
        if queue_trials and not waiting:
            session.add_all(
                new_trial(
                    search,
                    strategy=c.strategy,
                    candidate_id=c.id,
                    round_index=index,
                    predicted_time=c.predicted_time,
                )
                for c in rows
            )
        session.flush()
        return convert.round_(rnd), [convert.candidate(c) for c in rows]


def set_plan_options(session: Session, *, search_id: int, plan_options: dict[str, Any]) -> None:
    """Replace a search's stored plan options (the loop, once a job has checked them: issue 44)."""
    with session.begin():
        session.execute(
            update(SearchRow)
            .where(SearchRow.id == search_id)
            .values(plan_options=plan_options, updated_at=utcnow())
        )


def list_rounds(
    session: Session,
    *,
    search_id: int,
    owner_id: int | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[d.Round]:
    """The rounds of a search, first round first."""
    with session.begin():
        load_search(session, search_id, owner_id)
        # Rounds are created one after the other (add_round's gate), so id order is index order.
        q = select(RoundRow).where(RoundRow.search_id == search_id).order_by(RoundRow.index)
        return [convert.round_(r) for r in session.scalars(keyset(q, RoundRow.id, after=after, limit=limit))]


def set_round_state(session: Session, *, round_id: int, state: d.RoundState) -> d.Round:
    """Set a round's state (the loop marks rounds completed); finished_at set for final states."""
    with session.begin():
        rnd = session.get(RoundRow, round_id)
        if rnd is None:
            raise d.NotFound(f"no round {round_id}")
        rnd.state = state
        if state in ("completed", "cancelled") and rnd.finished_at is None:
            rnd.finished_at = utcnow()
        session.flush()
        return convert.round_(rnd)


def list_candidates(
    session: Session,
    *,
    search_id: int,
    round_index: int | None = None,
    owner_id: int | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[d.Candidate]:
    """Candidates of a search (optionally of one round), by round then rank."""
    with session.begin():
        load_search(session, search_id, owner_id)
        q = select(CandidateRow).where(CandidateRow.search_id == search_id)
        if round_index is not None:
            q = q.where(CandidateRow.round_index == round_index)
        # A round's candidates are inserted in rank order, so id order is (round, rank) order.
        q = q.order_by(CandidateRow.round_index, CandidateRow.rank)
        return [
            convert.candidate(r)
            for r in session.scalars(keyset(q, CandidateRow.id, after=after, limit=limit))
        ]


def get_candidate(session: Session, *, candidate_id: int, owner_id: int | None = None) -> d.Candidate:
    """One candidate; NotFound if absent or its search is not the owner's."""
    with session.begin():
        row = session.get(CandidateRow, candidate_id)
        if row is None:
            raise d.NotFound(f"no candidate {candidate_id}")
        load_search(session, row.search_id, owner_id)
        return convert.candidate(row)


def decide_candidate(
    session: Session,
    *,
    candidate_id: int,
    approve: bool,
    owner_id: int | None = None,
    max_queued_trials: int | None = None,
) -> tuple[d.Candidate, d.Trial | None]:
    """Approve (enqueue its trial) or reject a proposed candidate; returns it and its trial if any.

    Conflict when the search needs no approval, is final, the round is not awaiting approval, or
    the candidate was already decided the other way (deciding the same way again is a no-op).
    An approval queues a trial, so with ``max_queued_trials`` it is QuotaExceeded (429, naming the
    setting) while the search's owner already holds that many queued trials; nothing changes.
    When the last proposed candidate of the round is decided, the round and the search go back to
    'running' (the loop then waits for the round's trials, if any).
    """
    want = "approved" if approve else "rejected"
    with session.begin():
        cand = session.get(CandidateRow, candidate_id)
        if cand is None:
            raise d.NotFound(f"no candidate {candidate_id}")
        search = load_search(session, cand.search_id, owner_id, lock=True)
        session.refresh(cand)  # as of now, holding the search's lock (PostgreSQL)
        trial = session.scalars(select(TrialRow).where(TrialRow.candidate_id == cand.id)).one_or_none()
        if cand.status == want:
            return convert.candidate(cand), convert.trial(trial, None) if trial else None
        if not search.approval_required:
            raise d.Conflict(f"search {search.id} does not require approval")
        if search.state in d.SEARCH_FINAL:
            raise d.Conflict(f"search {search.id} is already {search.state}")
        if cand.status != "proposed":
            raise d.Conflict(f"candidate {candidate_id} was already {cand.status}")
        rnd = session.get_one(RoundRow, cand.round_id)
        if rnd.state != "awaiting_approval":
            # SQLite reads are not one snapshot: a racing call may have decided this candidate (and
            # so closed the round) after it was read above. Deciding the same way is then a no-op.
            session.refresh(cand)
            if cand.status == want:
                trial = session.scalars(
                    select(TrialRow).where(TrialRow.candidate_id == cand.id)
                ).one_or_none()
                return convert.candidate(cand), convert.trial(trial, None) if trial else None
            raise d.Conflict(f"round {rnd.index} is {rnd.state}, not awaiting approval")
        if approve and max_queued_trials is not None:
            queued = session.scalar(
                select(func.count())
                .select_from(TrialRow)
                .join(SearchRow, SearchRow.id == TrialRow.search_id)
                .where(SearchRow.owner_id == search.owner_id, TrialRow.state == "queued")
            )
            if int(queued or 0) >= max_queued_trials:
                raise d.QuotaExceeded(
                    f"your searches have {queued} queued trials, the limit is {max_queued_trials}"
                    " (max_queued_trials); approve this candidate when workers have taken some"
                )
        now = utcnow()
        won = session.execute(
            update(CandidateRow)
            .where(CandidateRow.id == cand.id, CandidateRow.status == "proposed")
            .values(status=want, decided_at=now)
        )
        session.refresh(cand)
        if affected(won) != 1:  # decided concurrently: the same way is a no-op, the other a conflict
            if cand.status != want:
                raise d.Conflict(f"candidate {candidate_id} was already {cand.status}")
            trial = session.scalars(select(TrialRow).where(TrialRow.candidate_id == cand.id)).one_or_none()
            return convert.candidate(cand), convert.trial(trial, None) if trial else None
        search = open_search_guard(session, search.id)
        if approve:
            trial = new_trial(
                search,
                strategy=cand.strategy,
                candidate_id=cand.id,
                round_index=cand.round_index,
                predicted_time=cand.predicted_time,
            )
            session.add(trial)
        session.flush()
        pending = session.scalars(
            select(CandidateRow.id).where(CandidateRow.round_id == rnd.id, CandidateRow.status == "proposed")
        ).first()
        if pending is None:
            session.execute(
                update(RoundRow)
                .where(RoundRow.id == rnd.id, RoundRow.state == "awaiting_approval")
                .values(state="running")
            )
            session.execute(
                update(SearchRow)
                .where(SearchRow.id == search.id, SearchRow.state == "awaiting_approval")
                .values(state="running", updated_at=now)
            )
        session.flush()
        return convert.candidate(cand), convert.trial(trial, None) if trial else None
