"""Two users (issue 44, item 6): nothing one user uploads (a profile, a profile job's result, a
model, a cluster) changes another's predictions or is visible to them; names are per user. An
admin's profile is zoo-wide. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

API = "/api/v1"
Q = {"model": "tiny-mlp", "cluster": "two-node"}  # the private test zoo's model and cluster


def _profile(fwd: float, batch: int = 8) -> dict[str, Any]:
    layers = [{"name": n, "fwd_s": fwd, "bwd_s": fwd} for n in ("fc1", "fc2")]
    return {"kind": "profile", "model": "tiny-mlp", "device": "T4", "dtype": "float32", "batch": batch,
            "layers": layers, "source": "test"}  # fmt: skip


def _compute(client: TestClient, who: dict[str, str]) -> float:
    r = client.get(f"{API}/profiles/compute", params=Q, headers=who)
    assert r.status_code == 200, r.text
    return float(r.json()["t_comp"])


def test_one_users_profile_never_changes_anothers_prediction(
    client: TestClient, tokens: dict[str, Any]
) -> None:
    alice, bob, admin = tokens["alice"], tokens["bob"], tokens["admin"]
    roofline = _compute(client, bob)
    r = client.post(f"{API}/profiles", json=_profile(3600.0), headers=alice)
    assert r.status_code == 201, r.text
    mine = r.json()["id"]
    assert _compute(client, alice) == pytest.approx(2 * 7200.0)  # alice's own is used for her
    assert _compute(client, bob) == roofline  # and for no one else
    assert client.get(f"{API}/profiles", headers=bob).json()["count"] == 0
    assert client.get(f"{API}/profiles/{mine}", headers=bob).status_code == 404
    # an admin's profile is zoo-wide: bob uses it; alice's own still wins for her
    shared = client.post(f"{API}/profiles", json=_profile(0.5), headers=admin).json()["id"]
    assert _compute(client, bob) == pytest.approx(2 * 1.0)
    assert _compute(client, alice) == pytest.approx(2 * 7200.0)
    assert [p["id"] for p in client.get(f"{API}/profiles", headers=bob).json()["data"]] == [shared]
    assert {p["id"] for p in client.get(f"{API}/profiles", headers=alice).json()["data"]} == {mine, shared}
    assert client.get(f"{API}/profiles", headers=admin).json()["count"] == 2


def test_a_profile_job_result_belongs_to_who_queued_it(client: TestClient, tokens: dict[str, Any]) -> None:
    alice, bob, worker = tokens["alice"], tokens["bob"], tokens["worker"]
    roofline = _compute(client, bob)
    job = client.post(
        f"{API}/profiles/jobs", json={"model": "tiny-mlp", "batch": 8, "device": "T4"}, headers=alice
    )
    assert job.status_code == 201, job.text
    jid = job.json()["id"]
    assert client.get(f"{API}/profiles/jobs/{jid}", headers=bob).status_code == 404  # not bob's job
    claim = client.post(f"{API}/profiles/jobs/claim", params={"worker": "g1"}, headers=worker)
    assert claim.status_code == 200, claim.text
    body = {"worker": "g1", "profile": _profile(100.0)}
    r = client.post(f"{API}/profiles/jobs/{jid}/result", json=body, headers=worker)
    assert r.status_code == 200 and r.json()["state"] == "done", r.text
    pid = r.json()["profile_id"]
    assert client.get(f"{API}/profiles/{pid}", headers=alice).json()["owner_id"] is not None
    assert client.get(f"{API}/profiles/{pid}", headers=bob).status_code == 404
    assert _compute(client, alice) == pytest.approx(2 * 200.0)
    assert _compute(client, bob) == roofline


def test_models_and_clusters_of_the_same_name_are_each_users_own(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    alice, bob = tokens["alice"], tokens["bob"]
    mine = specs.cluster("shared-name")
    theirs = specs.cluster("shared-name")
    theirs["nodes"][0]["gpus"] = 2
    a = client.post(f"{API}/clusters", json=mine, headers=alice)
    b = client.post(f"{API}/clusters", json=theirs, headers=bob)
    assert a.status_code == b.status_code == 201 and a.json()["id"] != b.json()["id"]
    assert client.get(f"{API}/clusters/{a.json()['id']}", headers=bob).status_code == 404
    assert [c["id"] for c in client.get(f"{API}/clusters", headers=bob).json()["data"]] == [b.json()["id"]]
    model = specs.model("my-model")
    m = client.post(f"{API}/models", json=model, headers=alice).json()["id"]
    assert client.get(f"{API}/models/{m}", headers=bob).status_code == 404
    assert client.get(f"{API}/models", headers=bob).json()["count"] == 0
    # each one's search on "shared-name" resolves to their own cluster
    for who, cid in ((alice, a.json()["id"]), (bob, b.json()["id"])):
        r = client.post(f"{API}/searches", json={"model": "tiny-mlp", "cluster": "shared-name"}, headers=who)
        assert r.status_code == 201, r.text
        assert r.json()["cluster_spec_id"] == cid


def test_a_worker_name_belongs_to_the_token_that_first_used_it(
    client: TestClient, tokens: dict[str, Any], session: Any
) -> None:
    from service.db import repository as repo

    other = {"Authorization": "Bearer " + repo.create_token(session, name="w-other", role="worker").secret}
    body = {"clusters": ["two-node"], "worker": "embedded-worker"}
    assert client.post(f"{API}/workers/claim", json=body, headers=tokens["worker"]).status_code == 204
    r = client.post(f"{API}/workers/claim", json=body, headers=other)
    assert r.status_code == 409 and "belongs to another token" in r.json()["detail"]
    assert client.post(f"{API}/workers/claim", json=body, headers=tokens["worker"]).status_code == 204
    assert client.post(f"{API}/workers/claim", json=body | {"worker": "w2"}, headers=other).status_code == 204
