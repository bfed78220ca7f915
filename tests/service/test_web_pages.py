"""Dashboard pages through the test client, on SQLite and PostgreSQL: login, isolation, approve/reject."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.domain import CandidateDraft
from service.web.auth import COOKIE


def _secret(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


def _login(client: TestClient, headers: dict[str, str]) -> None:
    r = client.post(
        "/ui/login", data={"token": _secret(headers), "next": "/ui/searches"}, follow_redirects=False
    )
    assert (r.status_code, r.headers["location"]) == (303, "/ui/searches")
    assert COOKIE in r.cookies


def _search_awaiting_approval(
    client: TestClient, headers: dict[str, str], session: Session, specs: Any
) -> int:
    body = {"model": "tiny-mlp", "cluster": "two-node", "candidates_per_round": 2, "approval_required": True,
            "name": "mine"}  # fmt: skip
    sid = int(client.post("/api/v1/searches", json=body, headers=headers).json()["id"])
    repo.transition_search(session, search_id=sid, from_states=["pending"], to_state="running")
    drafts = [
        CandidateDraft(rank=1, strategy=specs.strategy("a"), predicted_time=0.25, similarity=0.5),
        CandidateDraft(rank=2, strategy=specs.strategy("b", ps=True), predicted_time=0.35, similarity=0.2,
                       scorer="hybrid", uncertainty=0.0625),
    ]  # fmt: skip
    repo.add_round(session, search_id=sid, candidates=drafts, samples=100)
    return sid


def test_pages_need_a_login(client: TestClient, tokens: dict[str, Any]) -> None:
    r = client.get("/ui/searches/1", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, "/ui/login?next=/ui/searches/1")
    r = client.post("/ui/login", data={"token": "stg_nope"}, follow_redirects=False)
    assert r.status_code == 401 and "unknown or revoked token" in r.text
    r = client.post("/ui/login", data={"token": _secret(tokens["worker"])}, follow_redirects=False)
    assert r.status_code == 401 and "worker tokens cannot use the dashboard" in r.text
    r = client.post("/ui/login", data={"token": _secret(tokens["alice"]), "next": "https://evil.example/"},
                    follow_redirects=False)  # fmt: skip
    assert r.headers["location"] == "/ui/searches"  # never redirect off-site


def test_search_round_and_decisions(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    sid = _search_awaiting_approval(client, tokens["alice"], session, specs)
    _login(client, tokens["alice"])
    listing = client.get("/ui/searches").text
    assert f'href="/ui/searches/{sid}"' in listing and "awaiting_approval" in listing and "0/8" in listing
    page = client.get(f"/ui/searches/{sid}").text
    assert "tiny-mlp" in page and "two-node" in page and f"/ui/searches/{sid}/rounds/1" in page
    rnd = client.get(f"/ui/searches/{sid}/rounds/1").text
    assert rnd.count('data-testid="approve"') == 2 and "250.0 ms" in rnd and "0.200" in rnd
    # Which scorer ranked each candidate and its uncertainty (none for the analytical model).
    assert '<td data-testid="candidate-scorer">analytical</td>' in rnd
    assert '<td data-testid="candidate-scorer">hybrid</td>' in rnd and ">0.062</td>" in rnd

    r = client.post("/ui/candidates/1/approve", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (303, f"/ui/searches/{sid}/rounds/1")
    r = client.post("/ui/candidates/2/reject", follow_redirects=False)
    assert r.status_code == 303
    trials = repo.list_trials(session, search_id=sid)
    assert [(t.candidate_id, t.state) for t in trials] == [(1, "queued")]
    assert [c.status for c in repo.list_candidates(session, search_id=sid)] == ["approved", "rejected"]
    rnd = client.get(f"/ui/searches/{sid}/rounds/1").text
    assert 'data-testid="approve"' not in rnd and "queued" in rnd

    # Deciding again the other way is a conflict, shown on the page, and changes nothing.
    r = client.post("/ui/candidates/1/reject", follow_redirects=False)
    assert r.status_code == 303 and "error=" in r.headers["location"]
    assert "already approved" in client.get(r.headers["location"]).text
    assert [c.status for c in repo.list_candidates(session, search_id=sid)] == ["approved", "rejected"]

    strategy = client.get("/ui/candidates/2").text
    assert "PS" in strategy and "n0" in strategy and 'data-testid="per-server"' in strategy
    # memory per GPU with its parts and verdict; T = max(T_comp, E) with E shown (issue 43)
    assert 'data-testid="memory"' in strategy and 'data-testid="memory-verdict">fits<' in strategy
    assert "T = max(T_comp, E)" in strategy and 'data-testid="sync-end"' in strategy
    assert "T = max(T_comp, T_sync)" not in strategy
    trial = client.get(f"/ui/trials/{trials[0].id}")
    assert trial.status_code == 200 and "queued" in trial.text
    assert client.get(f"/ui/trials/{trials[0].id}/strategy").status_code == 200


def test_users_see_only_their_own(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    sid = _search_awaiting_approval(client, tokens["alice"], session, specs)
    _login(client, tokens["bob"])
    assert "No searches yet" in client.get("/ui/searches").text
    for url in (f"/ui/searches/{sid}", f"/ui/searches/{sid}/rounds/1", "/ui/candidates/1"):
        assert client.get(url).status_code == 404, url
    assert client.post("/ui/candidates/1/approve", follow_redirects=False).status_code == 404
    assert repo.list_candidates(session, search_id=sid)[0].status == "proposed"
    _login(client, tokens["admin"])
    assert client.get(f"/ui/searches/{sid}").status_code == 200


def test_plotly_is_served_locally(client: TestClient) -> None:
    r = client.get("/ui/static/plotly.min.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert len(r.content) > 1_000_000
