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


def _mixed(mask: int) -> dict[str, Any]:
    """A strategy of tiny-mlp on two-node: variable k on a PS if bit k of ``mask`` is set."""
    names = ("fc1.weight", "fc1.bias", "fc2.weight")
    syncs = [
        {"kind": "ps", "server": "n0"} if mask >> k & 1 else {"kind": "collective", "group": 0}
        for k in range(3)
    ]
    return {"kind": "strategy", "name": f"m{mask}",
            "variables": [{"variable": n, "shards": [sync]} for n, sync in zip(names, syncs, strict=True)]}  # fmt: skip


def _run_one_trial(session: Any, search_id: int, strategy: dict[str, Any], median: float) -> None:
    from service.db import repository as repo
    from simulator.spec.measurement import Measurement

    repo.enqueue_trial(session, search_id=search_id, strategy=strategy, baseline=f"b{median}")
    claim = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert claim is not None
    repo.report_trial(
        session, trial_id=claim.trial.id, attempt=claim.attempt, claim_token=claim.claim_token,
        measurement=Measurement(iteration_times=(median, median, median)),
    )  # fmt: skip


def test_one_users_runtimes_are_theirs_and_train_no_shared_simulator(
    client: TestClient, tokens: dict[str, Any], session: Any, sessions: Any, specs: Any, tmp_path: Any
) -> None:
    """Runtimes (issue 44): a user's uploads are listed to them only and never train a shared
    simulator; a shared (zoo) domain trains only on the service's trials of zoo specs and on an
    admin's runtimes. A user's model uploaded under the zoo model's name changes nothing shared."""
    from service.db import repository as repo
    from service.loop.simulators import RetrainConfig, Retrainer
    from service.loop.store import domain_specs

    alice, bob, admin = tokens["alice"], tokens["bob"], tokens["admin"]
    for i, who in enumerate((alice, alice, alice, alice, admin)):
        body = Q | {"strategy": _mixed(i + 1), "iteration_times": [0.1 * (i + 1)]}
        assert client.post(f"{API}/runtimes", json=body, headers=who).status_code == 201
    assert client.get(f"{API}/runtimes", headers=alice).json()["count"] == 4
    assert client.get(f"{API}/runtimes", headers=bob).json()["count"] == 0
    assert client.get(f"{API}/runtimes", headers=admin).json()["count"] == 5
    # bob's search on zoo specs: its trial is the service's measurement of a zoo domain (shared)
    zoo_search = client.post(f"{API}/searches", json=Q, headers=bob).json()["id"]
    _run_one_trial(session, zoo_search, _mixed(6), 0.7)
    # alice uploads her own "tiny-mlp" (another shape) and runs a search on it: hers, not shared
    fake = specs.model("tiny-mlp")
    fake["layers"][0]["fwd_flops"] = 4.0e12
    assert client.post(f"{API}/models", json=fake, headers=alice).status_code == 201
    own = client.post(f"{API}/searches", json=Q, headers=alice).json()
    _run_one_trial(session, own["id"], _mixed(7), 9.0)
    # 7 records of 7 distinct strategies in the domain, 2 of them shared: too few to train on
    retrainer = Retrainer(sessions, tmp_path, RetrainConfig(kind="linear", epochs=2, min_records=3))
    assert retrainer.retrain("tiny-mlp__two-node") is None
    shared = repo.list_runtimes(session, domain="tiny-mlp__two-node", shared_only=True)
    assert sorted((r.source, r.median_time) for r in shared) == [("trial", 0.7), ("user", pytest.approx(0.5))]
    # the shared training takes the zoo's specs, not alice's newer search on her upload
    model, _ = domain_specs(session, domain="tiny-mlp__two-node", shared=True)
    assert model.layers[0].fwd_flops == 4096.0
    assert client.get(f"{API}/simulators", headers=bob).json()["count"] == 0
