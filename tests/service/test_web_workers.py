"""Dashboard liveness: the workers page per pool, and the banner on a search whose trials wait for a
worker that is not there (SQLite and PostgreSQL)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.db.models import TrialRow, WorkerRow, utcnow
from service.web.auth import COOKIE


def _login(client: TestClient, headers: dict[str, str]) -> None:
    secret = headers["Authorization"].removeprefix("Bearer ")
    r = client.post("/ui/login", data={"token": secret, "next": "/ui/searches"}, follow_redirects=False)
    assert r.status_code == 303 and COOKIE in r.cookies


def _age(session: Session, table: Any, seconds: float, **where: Any) -> None:
    """Move a row's clock back ``seconds`` (as if that much time had passed)."""
    column = table.last_seen_at if table is WorkerRow else table.created_at
    with session.begin():
        q = update(table).values({column.key: utcnow() - timedelta(seconds=seconds)})
        for key, value in where.items():
            q = q.where(getattr(table, key) == value)
        session.execute(q)


def test_workers_page_and_stall_banner(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any, settings: Any
) -> None:
    _login(client, tokens["alice"])
    assert "No worker has ever connected" in client.get("/ui/workers").text
    sid = int(
        client.post(
            "/api/v1/searches", json={"model": "tiny-mlp", "cluster": "two-node", "name": "s"},
            headers=tokens["alice"],
        ).json()["id"]
    )  # fmt: skip
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("h"), baseline="horovod")
    repo.touch_worker(session, name="gpu-1", user_id=None, clusters=["B1"], pool="gpu")
    repo.touch_worker(session, name="tb-1", user_id=None, clusters=["two-node"], pool="testbed")
    page = client.get("/ui/workers").text
    assert 'gpu pool: <span data-testid="pool-live-gpu">1</span> live of 1' in page
    assert 'testbed pool: <span data-testid="pool-live-testbed">1</span> live of 1' in page
    assert 'data-testid="worker-alert"' not in client.get(f"/ui/searches/{sid}").text

    # tb-1 goes silent past the timeout and the trial has waited as long: both pages say so.
    late = settings.heartbeat_timeout_s + 10
    _age(session, WorkerRow, late, name="tb-1")
    _age(session, TrialRow, late + 5, search_id=sid)
    page = client.get("/ui/workers").text
    assert 'testbed pool: <span data-testid="pool-live-testbed">0</span> live of 1' in page
    assert ">silent<" in page and ">live<" in page
    search_page = client.get(f"/ui/searches/{sid}").text
    assert 'data-testid="worker-alert"' in search_page
    waited = re.search(
        r"1 trial\(s\) queued on cluster two-node for (\d+) s with no live worker for it", search_page
    )
    ago = re.search(r"last seen: worker tb-1 \(pool testbed\) (\d+) s ago", search_page)
    assert waited and ago and late <= int(waited[1]) == int(ago[1]) <= late + 30  # the request's own delay
    listing = client.get("/ui/searches").text
    assert 'data-testid="workers-banner"' in listing and "no live worker" in listing
    api = client.get(f"/api/v1/searches/{sid}", headers=tokens["alice"]).json()
    assert re.match(r"1 trial\(s\) queued on cluster two-node for \d+ s with no live", api["state_detail"])
    # and what to do: the command that would serve it (issue 43)
    assert (
        "strategist worker --pool testbed" in api["state_detail"]
        and "--clusters two-node" in api["state_detail"]
    )
    assert 'data-testid="worker-hint"' in search_page and "--clusters two-node" in search_page


def test_search_watch_prints_the_stall(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any, settings: Any
) -> None:
    from rich.console import Console

    from service.cli.search_cli_commands import watch_search
    from service.client import StrategistClient

    from .helpers import InProcess

    class OneLook(StrategistClient):
        """Waits for one status only (the search would wait for its worker forever)."""

        def wait(self, search_id: int, **kw: Any) -> Any:
            status = self.search(search_id)
            kw["on_progress"](status)
            return status

    secret = tokens["alice"]["Authorization"].removeprefix("Bearer ")
    api = OneLook("http://testserver", secret, transport=InProcess(client))
    sid = api.create_search(model="tiny-mlp", cluster="two-node").id
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("h"), baseline="horovod")
    console = Console(record=True, width=300)
    watch_search(api, sid, console)
    assert "waiting for workers" not in console.export_text()
    _age(session, TrialRow, settings.heartbeat_timeout_s + 1, search_id=sid)
    watch_search(api, sid, console)
    out = console.export_text()
    waited = re.search(
        r"waiting for workers: 1 trial\(s\) queued on cluster two-node for (\d+) s with no live", out
    )
    assert waited and settings.heartbeat_timeout_s + 1 <= int(waited[1]) <= settings.heartbeat_timeout_s + 30
    assert "(no worker has ever advertised it)" in out
