"""`service.client.StrategistClient` against the real app, in process (FastAPI's TestClient as its
httpx client), on SQLite and PostgreSQL: typed results, one error class for 4xx/5xx with the API's
detail, progress while waiting, runtime uploads; and `strategist search create|status|watch` driving
the same app through it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from service.api.schemas.searches import SearchPublic, SearchStatusPublic
from service.cli import app, search_cli_commands
from service.client import ApiError, StrategistClient
from service.db import repository as repo
from simulator.spec import Strategy

from .helpers import InProcess, api_client, route_cli

Make = Callable[..., StrategistClient]


@pytest.fixture
def transport(client: TestClient) -> InProcess:
    return InProcess(client)


@pytest.fixture
def make(transport: InProcess, session: Session) -> Make:
    """``make(name)``: a StrategistClient with a fresh user token, over the in-process app."""

    def build(name: str = "alice") -> StrategistClient:
        secret = repo.create_token(session, name=name, role="user").secret
        return StrategistClient("http://testserver", secret, transport=transport)

    return build


def test_create_read_list_and_cancel_are_typed(make: Make, hooks: Any) -> None:
    alice = make("alice")
    created = alice.create_search(model="tiny-mlp", cluster="two-node", trial_budget=3, name="p1")
    assert isinstance(created, SearchPublic)
    assert (created.model_name, created.cluster_name, created.trial_budget, created.state) == (
        "tiny-mlp", "two-node", 3, "pending",
    )  # fmt: skip
    assert hooks.calls == [("search_created", created.id)]
    status = alice.search(created.id)
    assert isinstance(status, SearchStatusPublic)
    assert status.search.id == created.id and status.best_trial_id is None
    assert [s.id for s in alice.searches()] == [created.id]
    assert alice.trials(created.id) == [] and alice.rounds(created.id) == []
    assert alice.best_trial(created.id) is None and alice.best_strategy(created.id) is None
    assert alice.cancel(created.id).state == "cancelled"


def test_http_errors_are_one_class_with_status_and_detail(make: Make, client: TestClient) -> None:
    alice, bob = make("alice"), make("bob")
    with pytest.raises(ApiError) as e:
        alice.create_search(model="no-such-model", cluster="two-node")
    assert e.value.status == 422
    assert isinstance(e.value.detail, list) and e.value.detail[0]["loc"] == ["body", "model"]
    assert str(e.value).startswith("HTTP 422: body.model: ")

    sid = alice.create_search(model="tiny-mlp", cluster="two-node").id
    with pytest.raises(ApiError) as e:
        bob.search(sid)  # not bob's: 404, the same as a search that does not exist
    assert e.value.status == 404 and isinstance(e.value.detail, str) and e.value.detail

    alice.cancel(sid)
    with pytest.raises(ApiError) as e:
        alice.cancel(sid)
    assert e.value.status == 409

    with pytest.raises(ApiError) as e:
        api_client(client, "stg_not-a-token").searches()
    assert e.value.status == 401


def test_a_bad_body_is_refused_before_any_request(make: Make) -> None:
    alice = make("alice")
    with pytest.raises(ValidationError, match="trial_budget"):
        alice.create_search(model="tiny-mlp", cluster="two-node", trial_budget=0)
    with pytest.raises(ValidationError, match="iteration_times"):
        alice.upload_runtime(model="tiny-mlp", cluster="two-node", strategy={}, iteration_times=[])
    assert alice.searches() == []


def test_wait_reports_progress_then_times_out_or_returns_the_final_status(make: Make) -> None:
    alice = make("alice")
    sid = alice.create_search(model="tiny-mlp", cluster="two-node").id
    seen: list[SearchStatusPublic] = []
    with pytest.raises(TimeoutError, match=f"search {sid} still pending"):
        alice.wait(sid, on_progress=seen.append, interval_s=0.05, timeout_s=0.3)
    assert len(seen) >= 2 and all(s.search.state == "pending" for s in seen)

    alice.cancel(sid)
    seen.clear()
    final = alice.wait(sid, on_progress=seen.append, interval_s=0.05)
    assert final.search.state == "cancelled" and [s.search.state for s in seen] == ["cancelled"]


def test_upload_runtimes_as_strategy_or_json(make: Make, specs: Any) -> None:
    alice = make("alice")
    strategy = Strategy.model_validate(specs.strategy("a"))
    rec = alice.upload_runtime(
        model="tiny-mlp", cluster="two-node", strategy=strategy, iteration_times=[0.3, 0.1, 0.2]
    )
    assert (rec.source, rec.domain, rec.median_time) == ("user", "tiny-mlp__two-node", pytest.approx(0.2))
    rec2 = alice.upload_runtime(
        model="tiny-mlp", cluster="two-node", strategy=specs.strategy("b", ps=True), iteration_times=[0.5]
    )
    assert [r.id for r in alice.runtimes("tiny-mlp__two-node")] == [rec.id, rec2.id]
    assert [r.id for r in alice.runtimes(since_id=rec.id)] == [rec2.id]
    assert make("bob").runtimes() == []  # only your own
    bad = specs.strategy("c")
    bad["variables"][0]["variable"] = "no.such.variable"
    with pytest.raises(ApiError) as e:
        alice.upload_runtime(model="tiny-mlp", cluster="two-node", strategy=bad, iteration_times=[0.1])
    assert e.value.status == 422 and "body.strategy" in str(e.value)


@pytest.fixture
def cli(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``cli(*args)``: run ``strategist search ...`` with its StrategistClient over the in-process app
    (asked for at the default API URL)."""
    route_cli(monkeypatch, search_cli_commands, client, api="http://127.0.0.1:8000")
    return lambda *args: CliRunner().invoke(app, ["search", *args])


def test_cli_create_status_watch_through_the_client(
    cli: Callable[..., Any], session: Session, transport: InProcess
) -> None:
    secret = repo.create_token(session, name="carol", role="user").secret
    r = cli("create", "--model", "tiny-mlp", "--cluster", "two-node", "--budget", "2", "--token", secret)
    assert r.exit_code == 0, r.output
    sid = int(r.stdout.strip())
    r = cli("status", str(sid), "--json", "--token", secret)
    assert r.exit_code == 0, r.output
    assert SearchStatusPublic.model_validate(json.loads(r.stdout)).search.trial_budget == 2
    r = cli("status", str(sid), "--token", secret)
    assert r.exit_code == 0 and f"search {sid} [pending] tiny-mlp on two-node" in r.stdout

    StrategistClient("http://testserver", secret, transport=transport).cancel(sid)
    r = cli("watch", str(sid), "--interval", "0.05", "--token", secret)
    assert r.exit_code == 0, r.output
    assert f"search {sid} cancelled" in r.stdout


def test_cli_errors_are_one_line_exit_2(cli: Callable[..., Any], session: Session) -> None:
    secret = repo.create_token(session, name="dave", role="user").secret
    r = cli("create", "--model", "nope", "--cluster", "two-node", "--token", secret)
    assert r.exit_code == 2 and r.output.strip().startswith("error: HTTP 422: body.model:")
    r = cli("create", "--model", "tiny-mlp", "--cluster", "two-node", "--budget", "0", "--token", secret)
    assert r.exit_code == 2 and r.output.strip().startswith("error: --budget:")
    r = cli("status", "999", "--token", secret)
    assert r.exit_code == 2 and r.output.strip().startswith("error: HTTP 404:")
    r = cli("status", "1")
    assert r.exit_code == 2 and "--token" in r.output


def test_a_non_json_error_keeps_its_status_and_text() -> None:
    proxy = httpx.MockTransport(lambda req: httpx.Response(502, text="<html>bad gateway</html>"))
    with StrategistClient("http://api.invalid", "t", transport=proxy) as api, pytest.raises(ApiError) as e:
        api.search(1)
    assert (e.value.status, e.value.detail, e.value.method) == (502, "<html>bad gateway</html>", "GET")
    assert e.value.url == "http://api.invalid/api/v1/searches/1"


def test_an_unreachable_api_is_one_line_exit_2() -> None:
    r = CliRunner().invoke(app, ["search", "status", "1", "--token", "t", "--api", "http://127.0.0.1:9"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and len(r.output.strip().splitlines()) == 1


def _status_json(state: str) -> dict[str, Any]:
    now = "2026-01-01T00:00:00Z"
    search = {
        "id": 1, "name": "", "owner_id": 1, "model_spec_id": 1, "cluster_spec_id": 1, "model_name": "m",
        "cluster_name": "c", "objective": "time", "trial_budget": 2, "candidates_per_round": 1,
        "samples_per_round": 1, "approval_required": False, "seed": 0, "compression": "none",
        "space": "lossless", "state": state, "current_round": 0, "failure_reason": None,
        "created_at": now, "updated_at": now, "finished_at": None,
    }  # fmt: skip
    return {
        "search": search, "trials_by_state": {}, "candidate_trials_done": 0, "best_trial_id": None,
        "best_candidate_id": None, "best_time": None, "baselines": [], "speedups": {},
    }  # fmt: skip


def scripted(answers: list[Any]) -> httpx.MockTransport:
    """A server answering each poll with the next of ``answers``: a state, a status code or an exception."""

    def handle(request: httpx.Request) -> httpx.Response:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, int):
            return httpx.Response(answer, json={"detail": f"status {answer}"})
        return httpx.Response(200, json=_status_json(answer))

    return httpx.MockTransport(handle)


def test_wait_rides_out_a_restarting_server() -> None:
    answers: list[Any] = ["running", httpx.ConnectError("refused"), 503, 502, "running", "completed"]
    seen: list[str] = []
    with StrategistClient("http://api", "t", transport=scripted(answers)) as api:
        final = api.wait(1, on_progress=lambda st: seen.append(st.search.state), interval_s=0.01)
    assert final.search.state == "completed" and seen == ["running", "running", "completed"]
    assert answers == []


def test_wait_gives_up_after_failures_in_a_row_and_at_once_on_other_errors() -> None:
    api = StrategistClient("http://api", "t", transport=scripted([503, 503, 503]))
    with pytest.raises(ApiError) as e:
        api.wait(1, interval_s=0.01, max_poll_failures=3)
    assert e.value.status == 503
    answers: list[Any] = ["running", 401, "completed"]
    api = StrategistClient("http://api", "t", transport=scripted(answers))
    with pytest.raises(ApiError) as e:
        api.wait(1, interval_s=0.01)
    assert e.value.status == 401 and answers == ["completed"]  # a revoked token is not retried
