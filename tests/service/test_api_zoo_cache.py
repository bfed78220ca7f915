"""Zoo reads are computed once per app (service.api.zoo_cache): the same answer as the first
render, without storing or reading the zoo copy again, for zoo GETs and for search creation."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.db import repo_specs

API = "/api/v1"


def test_zoo_entries_are_stored_and_rendered_once(
    client: TestClient, tokens: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, str]] = []
    real = repo_specs.zoo_spec

    def counting(session: Any, *, kind: Any, name: str) -> Any:
        calls.append((kind, name))
        return real(session, kind=kind, name=name)

    monkeypatch.setattr("service.db.repository.zoo_spec", counting)
    h = tokens["alice"]
    first = client.get(f"{API}/models/zoo/tiny-mlp", headers=h)
    again = client.get(f"{API}/models/zoo/tiny-mlp", headers=h)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert first.json()["name"] == "tiny-mlp" and first.json()["layers"] == 2
    assert first.headers["content-type"] == "application/json"
    assert client.get(f"{API}/clusters/zoo/two-node", headers=h).json()["gpus"] == 2
    assert calls == [("model", "tiny-mlp"), ("cluster", "two-node")]
    # Creating searches on zoo entries reuses the stored copies (the same spec ids).
    body = {"model": "tiny-mlp", "cluster": "two-node"}
    made = [client.post(f"{API}/searches", json=body, headers=h).json() for _ in range(2)]
    assert {m["model_spec_id"] for m in made} == {first.json()["id"]}
    assert calls == [("model", "tiny-mlp"), ("cluster", "two-node")]
    # An unknown name is still a 404 (or a 422 naming the field on create), and never cached.
    assert client.get(f"{API}/models/zoo/nope", headers=h).status_code == 404
    r = client.post(f"{API}/searches", json={"model": "nope", "cluster": "two-node"}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "model"]
    # A user's own upload of a zoo name wins over the zoo, as before.
    own = client.get(f"{API}/models/zoo/tiny-mlp", headers=h).json()["spec"] | {"batch_size": 4}
    up = client.post(f"{API}/models", json=own, headers=h)
    assert up.status_code == 201, up.text
    r = client.post(f"{API}/searches", json=body, headers=h)
    assert r.json()["model_spec_id"] == up.json()["id"]


def test_zoo_reads_carry_an_etag_and_answer_304_when_it_matches(
    client: TestClient, tokens: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    h = tokens["alice"]
    first = client.get(f"{API}/models/zoo/tiny-mlp", headers=h)
    etag = first.headers["etag"]
    assert first.status_code == 200 and etag.startswith('"') and etag.endswith('"') and len(etag) == 34
    assert client.get(f"{API}/clusters/zoo/two-node", headers=h).status_code == 200
    # From here on a read must not touch the database at all: served from memory on the event loop.
    monkeypatch.setattr("service.db.repository.zoo_spec", lambda *a, **k: pytest.fail("zoo_spec called"))
    again = client.get(f"{API}/models/zoo/tiny-mlp", headers=h)
    assert again.content == first.content and again.headers["etag"] == etag
    for match in (etag, f'"other", {etag}', f"W/{etag}", "*"):
        r = client.get(f"{API}/models/zoo/tiny-mlp", headers=h | {"If-None-Match": match})
        assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == etag, match
    stale = client.get(f"{API}/models/zoo/tiny-mlp", headers=h | {"If-None-Match": '"other"'})
    assert stale.status_code == 200 and stale.content == first.content
    # Each entry has its own tag; a cluster's does not match a model's.
    cluster = client.get(f"{API}/clusters/zoo/two-node", headers=h | {"If-None-Match": etag})
    assert cluster.status_code == 200 and cluster.headers["etag"] != etag
    # Authentication still comes first.
    assert client.get(f"{API}/models/zoo/tiny-mlp").status_code == 401
