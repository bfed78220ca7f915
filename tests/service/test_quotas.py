"""Quotas on every path that creates work (issue 44, item 3): the dashboard's create form and the
search loop, before it queues a round's trials, check the same limits as ``POST /searches``
(`service.db.repo_quotas`), and say which limit. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.db import repository as repo
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
