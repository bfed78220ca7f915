"""Quotas on every path that creates work (issue 44, item 3): the dashboard's create form, an
approval (API and dashboard) and the search loop, before it queues a round's trials or a search's
baselines, check the same limits as ``POST /searches`` (`service.db.repo_quotas`), and say which
limit. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.db import repository as repo
from service.domain import CandidateDraft
from service.loop import LoopConfig, SearchLoop
from service.loop.rounds import RoundConfig
from service.settings import Settings
from service.web.auth import COOKIE
from simulator.spec.measurement import Measurement

API = "/api/v1"
FORM = {"model": "tiny-mlp", "cluster": "two-node", "trial_budget": "4", "candidates_per_round": "2",
        "samples_per_round": "50"}  # fmt: skip
WAIT = 120.0


@pytest.fixture
def small_app(settings: Settings, engine: Engine, zoo_dir: Path) -> Iterator[FastAPI]:
    yield create_app(settings.model_copy(update={"max_active_searches": 2, "max_queued_trials": 3}))


def _login(client: TestClient, headers: dict[str, str]) -> None:
    secret = headers["Authorization"].removeprefix("Bearer ")
    r = client.post("/ui/login", data={"token": secret}, follow_redirects=False)
    assert r.status_code == 303 and COOKIE in r.cookies


def test_the_dashboard_form_checks_the_active_search_quota(
    small_app: FastAPI, tokens: dict[str, Any]
) -> None:
    with TestClient(small_app) as client:
        _login(client, tokens["alice"])
        for _ in range(2):
            assert client.post("/ui/searches/new", data=FORM, follow_redirects=False).status_code == 303
        r = client.post("/ui/searches/new", data=FORM, follow_redirects=False)
        assert r.status_code == 429 and "max_active_searches" in r.text and "the limit is 2" in r.text
        assert client.get(f"{API}/searches", headers=tokens["alice"]).json()["count"] == 2
        api = client.post(
            f"{API}/searches", json={"model": "tiny-mlp", "cluster": "two-node"}, headers=tokens["alice"]
        )
        assert api.status_code == 429 and "(max_active_searches)" in api.json()["detail"]


def test_the_dashboard_form_checks_the_queued_trial_quota(
    small_app: FastAPI, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    with TestClient(small_app) as client:
        _login(client, tokens["alice"])
        r = client.post("/ui/searches/new", data=FORM, follow_redirects=False)
        sid = int(r.headers["location"].rsplit("/", 1)[1])
        for name in ("a", "b", "c"):
            repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy(name), baseline=name)
        r = client.post("/ui/searches/new", data=FORM, follow_redirects=False)
        assert r.status_code == 429 and "max_queued_trials" in r.text


def _run_queued(sessions: sessionmaker[Session]) -> int:
    n = 0
    with sessions() as s:
        while (claim := repo.claim_trial(s, worker="w", clusters=["two-node"])) is not None:
            m = Measurement(iteration_times=(0.1, 0.1, 0.1))
            repo.report_trial(
                s,
                trial_id=claim.trial.id,
                attempt=claim.attempt,
                claim_token=claim.claim_token,
                measurement=m,
            )
            n += 1
    return n


def test_the_loop_waits_before_queueing_a_round_past_the_quota(
    sessions: sessionmaker[Session], search_of: Any
) -> None:
    search = search_of(trial_budget=3, candidates_per_round=2, samples_per_round=30)
    config = LoopConfig(round=RoundConfig(qualified_fraction=0.5), max_queued_trials=5)
    loop = SearchLoop(sessions, config=config)
    try:
        assert loop.advance(search.id, wait_s=WAIT) == "baselines queued"
        with sessions() as s:
            queued = repo.user_usage(s, owner_id=search.owner_id).queued_trials
        assert queued == 4  # the round's 2 trials would make 6 > 5
        step = loop.advance(search.id, wait_s=WAIT)
        assert step.startswith("round 1 waits") and "max_queued_trials of 5" in step, step
        with sessions() as s:
            assert repo.list_rounds(s, search_id=search.id) == []
            assert repo.user_usage(s, owner_id=search.owner_id).queued_trials == 4
        assert _run_queued(sessions) == 4
        assert loop.advance(search.id, wait_s=WAIT) == "round 1 planned"
    finally:
        loop.stop()


def _awaiting_approval(client: TestClient, headers: dict[str, str], session: Session, specs: Any) -> int:
    """A search of the caller with round 1's two candidates proposed (awaiting approval)."""
    body = {"model": "tiny-mlp", "cluster": "two-node", "candidates_per_round": 2, "approval_required": True}
    r = client.post(f"{API}/searches", json=body, headers=headers)
    assert r.status_code == 201, r.text
    sid = int(r.json()["id"])
    repo.transition_search(session, search_id=sid, from_states=["pending"], to_state="running")
    drafts = [
        CandidateDraft(rank=i + 1, strategy=specs.strategy(n), predicted_time=0.3, similarity=0.5)
        for i, n in enumerate(("p", "q"))
    ]
    repo.add_round(session, search_id=sid, candidates=drafts, samples=10)
    return sid


def test_approving_a_candidate_checks_the_queued_trial_quota(
    small_app: FastAPI, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    """An approval queues a trial: with the owner's queue full it is 429 naming max_queued_trials, on
    the API and the dashboard, and nothing changes; after workers took some it goes through."""
    with TestClient(small_app) as client:
        alice = tokens["alice"]
        sid = _awaiting_approval(client, alice, session, specs)
        for name in ("a", "b", "c"):
            repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy(name), baseline=name)
        cands = client.get(f"{API}/searches/{sid}/candidates", headers=alice).json()["data"]
        r = client.post(f"{API}/candidates/{cands[0]['id']}/approve", headers=alice)
        assert r.status_code == 429 and "(max_queued_trials)" in r.json()["detail"], r.text
        _login(client, alice)
        r = client.post(f"/ui/candidates/{cands[1]['id']}/approve", follow_redirects=False)
        assert r.status_code == 303 and "max_queued_trials" in unquote(r.headers["location"])
        after = client.get(f"{API}/searches/{sid}/candidates", headers=alice).json()["data"]
        assert [c["status"] for c in after] == ["proposed", "proposed"]
        assert repo.user_usage(session, owner_id=1).queued_trials == 3
        # a rejection queues nothing: never refused
        assert client.post(f"{API}/candidates/{cands[1]['id']}/reject", headers=alice).status_code == 200
        repo.claim_trial(session, worker="w", clusters=["two-node"])  # one leaves the queue
        r = client.post(f"{API}/candidates/{cands[0]['id']}/approve", headers=alice)
        assert r.status_code == 200 and r.json()["trial"]["state"] == "queued", r.text


def test_the_loop_waits_before_queueing_baselines_past_the_quota(
    sessions: sessionmaker[Session], search_of: Any, specs: Any
) -> None:
    """The loop checks the quota before it queues a search's baselines too: another search of the
    same owner holding the queue makes the new one wait (not fail) until workers take trials."""
    first = search_of(trial_budget=2, candidates_per_round=2, samples_per_round=30)
    with sessions() as s:
        for name in ("a", "b", "c", "d", "e"):
            repo.enqueue_trial(s, search_id=first.id, strategy=specs.strategy(name), baseline=name)
        model = repo.zoo_spec(s, kind="model", name="tiny-mlp")
        cluster = repo.zoo_spec(s, kind="cluster", name="two-node")
        second = repo.create_search(
            s, owner_id=first.owner_id, model=model, cluster=cluster, trial_budget=2, candidates_per_round=2,
            samples_per_round=30,
        )  # fmt: skip
    loop = SearchLoop(sessions, config=LoopConfig(max_queued_trials=5))
    try:
        step = loop.advance(second.id, wait_s=WAIT)
        assert step.startswith("its baselines waits") and "max_queued_trials of 5" in step, step
        with sessions() as s:
            assert repo.list_trials(s, search_id=second.id) == []
            assert repo.get_search(s, search_id=second.id).state == "running"
        assert _run_queued(sessions) == 5
        assert loop.advance(second.id, wait_s=WAIT) == "baselines queued"
    finally:
        loop.stop()
