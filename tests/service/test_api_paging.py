"""Paging of list endpoints (limit + keyset cursor), bounds answered 422 naming the field, and the
client following every page (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.client import StrategistClient
from service.db import repository as repo
from service.domain import CandidateDraft

from .helpers import InProcess

API = "/api/v1"


def _pages(client: TestClient, path: str, headers: dict[str, str], limit: int) -> list[list[int]]:
    """The ids of every page of ``path`` at ``limit`` items, following next_cursor."""
    pages, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        r = client.get(f"{API}{path}", params=params, headers=headers)
        assert r.status_code == 200, r.text
        body = r.json()
        ids = [item["id"] for item in body["data"]]
        assert body["count"] == len(ids) <= limit
        pages.append(ids)
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
        assert cursor == ids[-1]


def test_lists_page_by_cursor(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    h = tokens["alice"]
    sids = [
        client.post(f"{API}/searches", json={"model": "tiny-mlp", "cluster": "two-node", "name": f"s{i}"}, headers=h)
        .json()["id"]
        for i in range(5)
    ]  # fmt: skip
    # Searches: newest first, 2 + 2 + 1, nothing repeated or missed.
    assert _pages(client, "/searches", h, 2) == [sids[4:2:-1], sids[2:0:-1], sids[:1]]
    assert _pages(client, "/searches", h, 5) == [sids[::-1]]
    assert _pages(client, "/searches", tokens["bob"], 2) == [[]]  # only your own
    # A search created between two pages neither repeats nor shifts what follows (keyset).
    first = client.get(f"{API}/searches", params={"limit": 2}, headers=h).json()
    client.post(f"{API}/searches", json={"model": "tiny-mlp", "cluster": "two-node"}, headers=h)
    second = client.get(
        f"{API}/searches", params={"limit": 2, "cursor": first["next_cursor"]}, headers=h
    ).json()
    assert [s["id"] for s in second["data"]] == sids[2:0:-1]

    # Trials: oldest first.
    sid = sids[0]
    names = ["b1", "b2", "b3", "b4", "b5"]
    tids = [
        repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy(n), baseline=n).id for n in names
    ]
    assert _pages(client, f"/searches/{sid}/trials", h, 2) == [tids[0:2], tids[2:4], tids[4:]]
    assert _pages(client, f"/searches/{sid}/trials?state=queued", h, 3) == [tids[0:3], tids[3:]]
    # Candidates: by round then rank, which is id order.
    repo.transition_search(session, search_id=sids[1], from_states=["pending"], to_state="running")
    drafts = [
        CandidateDraft(rank=r, strategy=specs.strategy(f"c{r}"), predicted_time=0.1 * r, similarity=0.0)
        for r in (3, 1, 2)
    ]
    repo.add_round(session, search_id=sids[1], candidates=drafts, samples=10)
    pages = _pages(client, f"/searches/{sids[1]}/candidates", h, 2)
    ranks = [c["rank"] for c in client.get(f"{API}/searches/{sids[1]}/candidates", headers=h).json()["data"]]
    assert [len(p) for p in pages] == [2, 1] and ranks == [1, 2, 3]
    flat = [i for p in pages for i in p]
    assert flat == sorted(flat)

    # The client follows every page; the CLI and the dashboard use it / the repository.
    api = StrategistClient(
        "http://testserver", h["Authorization"].removeprefix("Bearer "), transport=InProcess(client)
    )
    assert [t.id for t in api.trials(sid, page_size=2)] == tids
    assert [s.id for s in api.searches()][-5:] == sids[::-1]


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"), ("cursor=0", "cursor"),
     ("cursor=2147483648", "cursor"), ("cursor=-1", "cursor")],
)  # fmt: skip
def test_paging_bounds_are_422_naming_the_field(
    client: TestClient, tokens: dict[str, Any], query: str, field: str
) -> None:
    for path in ("/searches", "/models", "/clusters", "/simulators", "/searches/1/trials"):
        r = client.get(f"{API}{path}?{query}", headers=tokens["alice"])
        assert r.status_code == 422, (path, r.text)
        assert r.json()["detail"][0]["loc"] == ["query", field], (path, r.json())
