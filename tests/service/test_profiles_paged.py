"""Issue 44, item 1: ``GET /profiles`` was not paged (every stored profile, full, in one answer). It
is paged like every list (``limit``, ``cursor``, ``next_cursor``; docs/service.md) and lists
summaries: the full profile is at ``/profiles/{id}``."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

API = "/api/v1"


def _profile(batch: int) -> dict[str, Any]:
    layers = [{"name": f"fc{i}", "fwd_s": 0.001, "bwd_s": 0.002} for i in range(50)]
    return {"model": "tiny-mlp", "device": "T4", "dtype": "float32", "batch": batch, "layers": layers}


def test_profiles_are_paged_and_listed_as_summaries(client: TestClient, tokens: dict[str, Any]) -> None:
    alice = tokens["alice"]
    made = []
    for batch in (1, 2, 3):
        r = client.post(f"{API}/profiles", json=_profile(batch), headers=alice)
        assert r.status_code == 201, r.text
        made.append(r.json()["id"])
    seen: list[int] = []
    cursor = None
    for _ in range(5):
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor is not None else {})
        page = client.get(f"{API}/profiles", params=params, headers=alice).json()
        assert page["count"] == len(page["data"]) <= 2, page
        assert all("profile" not in p and p["layers"] == 50 for p in page["data"]), page["data"][0]
        seen += [p["id"] for p in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(made) and len(seen) == 3  # every one once, over two pages
    assert client.get(f"{API}/profiles", params={"limit": 0}, headers=alice).status_code == 422
    full = client.get(f"{API}/profiles/{made[0]}", headers=alice).json()
    assert len(full["profile"]["layers"]) == 50
