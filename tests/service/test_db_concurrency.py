"""State changes racing each other on SQLite and PostgreSQL: one winner, no error, no double effect."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from service.db import repository as repo
from service.domain import CandidateDraft, Conflict


def race(sessions: sessionmaker[Session], n: int, action: Callable[[Session, int], Any]) -> list[Any]:
    """Run ``action(session, i)`` in ``n`` threads at once (own session each); results or exceptions."""
    out: list[Any] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        with sessions() as s:
            barrier.wait()
            try:
                result: Any = action(s, i)
            except Exception as e:  # collected: the test asserts which ones were expected
                result = e
            with lock:
                out.append(result)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_racing_approvals_queue_one_trial(
    sessions: sessionmaker[Session], session: Session, search_of: Any, specs: Any
) -> None:
    s = search_of(approval_required=True)
    draft = CandidateDraft(rank=1, strategy=specs.strategy("a"), predicted_time=0.2, similarity=0.0)
    _, (cand,) = repo.add_round(session, search_id=s.id, candidates=[draft], samples=10)
    results = race(sessions, 5, lambda own, _: repo.decide_candidate(own, candidate_id=cand.id, approve=True))
    assert all(not isinstance(r, Exception) for r in results), [
        repr(r) for r in results if isinstance(r, Exception)
    ]
    assert {r[1].id for r in results} == {1}  # every caller sees the one trial
    assert len(repo.list_trials(session, search_id=s.id)) == 1
    assert repo.get_search(session, search_id=s.id).state == "running"


def test_racing_cancels_have_one_winner(
    sessions: sessionmaker[Session], session: Session, search_of: Any
) -> None:
    s = search_of()
    results = race(sessions, 4, lambda own, _: repo.cancel_search(own, search_id=s.id))
    assert sum(1 for r in results if isinstance(r, Conflict)) == 3
    assert [r.state for r in results if not isinstance(r, Exception)] == ["cancelled"]


def test_racing_rounds_add_one_round(
    sessions: sessionmaker[Session], session: Session, search_of: Any, specs: Any
) -> None:
    s = search_of()
    draft = CandidateDraft(rank=1, strategy=specs.strategy("a"), predicted_time=0.2, similarity=0.0)
    current = repo.get_search(session, search_id=s.id).current_round

    def add(own: Session, _: int) -> Any:
        # Like a loop that read the search, then adds the round it thinks is next.
        if repo.get_search(own, search_id=s.id).current_round != current:
            raise Conflict("moved on")
        return repo.add_round(own, search_id=s.id, candidates=[draft], samples=1)

    results = race(sessions, 4, add)
    assert all(isinstance(r, (Conflict, tuple)) for r in results), results
    rounds = repo.list_rounds(session, search_id=s.id)
    # Each successful call added exactly one round with consecutive indices; no error escaped.
    assert [r.index for r in rounds] == list(range(1, len(rounds) + 1))
    assert len(rounds) == sum(1 for r in results if isinstance(r, tuple)) >= 1


def test_cancel_racing_enqueues_leaves_nothing_claimable(
    sessions: sessionmaker[Session], session: Session, search_of: Any, specs: Any
) -> None:
    s = search_of()

    def act(own: Session, i: int) -> Any:
        if i == 0:
            return repo.cancel_search(own, search_id=s.id)
        name = f"b{i}"
        return repo.enqueue_trial(own, search_id=s.id, strategy=specs.strategy(name), baseline=name)

    results = race(sessions, 6, act)
    assert all(not isinstance(r, Exception) or isinstance(r, Conflict) for r in results), results
    assert repo.get_search(session, search_id=s.id).state == "cancelled"
    assert repo.claim_trial(session, worker="w", clusters=["two-node"]) is None
    assert {t.state for t in repo.list_trials(session, search_id=s.id)} <= {"cancelled"}
