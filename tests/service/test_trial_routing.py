"""Trials are routed by cluster spec id, not name (issue 43): two users' clusters named alike never
share a queue; a zoo cluster's trials go to any worker advertising it. SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from service.db import repository as repo
from service.db.models import PoolSpecRow, TrialRow, utcnow
from service.loop.stack import Stack, StackConfig, embedded_worker_argv, worker_env
from service.settings import Settings

API = "/api/v1"


def _lab(specs: Any, nic_gbps: float) -> dict[str, Any]:
    """A cluster named 'lab'; ``nic_gbps`` tells whose it is in a claim's cluster body."""
    body = specs.cluster("lab")
    for node in body["nodes"]:
        node["nic_gbps"] = nic_gbps
    return dict(body)


def _two_labs(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> tuple[dict[str, str], dict[str, str]]:
    """Alice and Bob each upload a cluster named 'lab' (10 and 25 Gbit/s NICs); their headers."""
    alice, bob = tokens["alice"], tokens["bob"]
    assert client.post(f"{API}/clusters", json=_lab(specs, 10), headers=alice).status_code == 201
    assert client.post(f"{API}/clusters", json=_lab(specs, 25), headers=bob).status_code == 201
    return alice, bob


def _search(client: TestClient, who: dict[str, str], cluster: str, session: Session, specs: Any) -> int:
    """A search of ``who`` on ``cluster`` with one queued baseline trial; returns the trial id."""
    r = client.post(f"{API}/searches", json={"model": "tiny-mlp", "cluster": cluster}, headers=who)
    assert r.status_code == 201, r.text
    trial = repo.enqueue_trial(
        session, search_id=r.json()["id"], strategy=specs.strategy("horovod"), baseline="horovod"
    )
    return trial.id


def _claim(client: TestClient, who: dict[str, str], *clusters: str) -> dict[str, Any] | None:
    r = client.post(f"{API}/workers/claim", json={"clusters": list(clusters)}, headers=who)
    assert r.status_code in (200, 204), r.text
    return r.json() if r.status_code == 200 else None


def test_two_users_clusters_of_the_same_name_have_separate_queues(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    alice, bob = _two_labs(client, tokens, specs)
    alices = _search(client, alice, "lab", session, specs)  # the older trial: a name queue hands it out first
    bobs = _search(client, bob, "lab", session, specs)
    # Neither a fleet worker nor an admin's worker resolves 'lab' to anybody's upload.
    assert _claim(client, tokens["worker"], "lab") is None
    assert _claim(client, tokens["admin"], "lab") is None
    got = _claim(client, bob, "lab")
    assert got is not None and got["trial"]["id"] == bobs
    assert {n["nic_gbps"] for n in got["cluster"]["nodes"]} == {25}  # bob's own spec
    assert _claim(client, bob, "lab") is None  # alice's trial stays hers
    mine = _claim(client, alice, "lab")
    assert mine is not None and mine["trial"]["id"] == alices
    assert {n["nic_gbps"] for n in mine["cluster"]["nodes"]} == {10}
    # The person's token heartbeats and reports its claim like a worker token.
    ident = {"attempt": mine["attempt"], "claim_token": mine["claim_token"]}
    hb = client.post(f"{API}/trials/{alices}/heartbeat", json=ident, headers=alice)
    assert hb.status_code == 200 and hb.json()["accepted"] is True
    measurement = {"iteration_times": [0.5, 0.5, 0.5], "warmup": 2}
    r = client.post(f"{API}/trials/{alices}/report", json=ident | {"measurement": measurement}, headers=alice)
    assert r.status_code == 200 and r.json()["recorded"] is True, r.text
    assert r.json()["trial"]["state"] == "succeeded"


def test_a_zoo_cluster_routes_to_any_worker_advertising_it(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    alice, bob = tokens["alice"], tokens["bob"]
    first = _search(client, alice, "two-node", session, specs)
    second = _search(client, bob, "two-node", session, specs)
    third = _search(client, alice, "two-node", session, specs)
    # A worker token serves every owner's searches on the zoo cluster, oldest first.
    got = _claim(client, tokens["worker"], "two-node")
    assert got is not None and got["trial"]["id"] == first
    # A person's own worker resolves the zoo name too, but measures only their own searches.
    got = _claim(client, alice, "two-node")
    assert got is not None and got["trial"]["id"] == third
    assert _claim(client, alice, "two-node") is None
    got = _claim(client, bob, "two-node")
    assert got is not None and got["trial"]["id"] == second


def test_an_own_upload_shadows_the_zoo_entry_of_its_name(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    alice, bob = tokens["alice"], tokens["bob"]
    zoo_trial = _search(client, bob, "two-node", session, specs)
    mine = specs.cluster("two-node")
    mine["intra_node_gbps"] = 50
    assert client.post(f"{API}/clusters", json=mine, headers=alice).status_code == 201
    upload_trial = _search(client, alice, "two-node", session, specs)  # resolves to her upload
    assert _claim(client, tokens["worker"], "two-node") is not None  # bob's, on the zoo entry
    assert _claim(client, tokens["worker"], "two-node") is None  # never alice's upload
    got = _claim(client, alice, "two-node")
    assert got is not None and got["trial"]["id"] == upload_trial
    assert got["cluster"]["intra_node_gbps"] == 50
    assert zoo_trial != upload_trial


def test_pool_clusters_go_to_their_agents_only(session: Session, specs: Any, zoo_dir: Any) -> None:
    """A cluster stored from an agent pool is never resolved for a plain worker, even its owner's."""
    from service.db.repo_trials import runnable_cluster_ids
    from simulator.spec import ClusterSpec

    owner = repo.create_token(session, name="carol", role="user").info.user_id
    pool = repo.store_spec(session, spec=ClusterSpec.model_validate(specs.cluster("rack")), owner_id=owner)
    with session.begin():
        session.add(PoolSpecRow(pool="rack", spec_id=pool.id))
    model = repo.zoo_spec(session, kind="model", name="tiny-mlp")
    search = repo.create_search(session, owner_id=owner, model=model, cluster=pool)
    repo.enqueue_trial(session, search_id=search.id, strategy=specs.strategy("h"), baseline="horovod")
    for user_id in (owner, None):
        assert repo.claim_trial(session, worker="w", clusters=["rack"], user_id=user_id) is None
    with session.begin():
        assert runnable_cluster_ids(session, names=["rack"], user_id=owner) == []


def test_the_no_worker_notice_counts_only_workers_that_can_claim(
    client: TestClient, tokens: dict[str, Any], session: Session, specs: Any
) -> None:
    """A live worker advertising 'lab' for another user does not hide that nobody serves yours."""
    alice, bob = _two_labs(client, tokens, specs)
    trial = _search(client, alice, "lab", session, specs)
    search_id = repo.get_trial(session, trial_id=trial).search_id
    with session.begin():  # queued 60 s ago: past the liveness window
        session.execute(update(TrialRow).values(created_at=utcnow() - timedelta(seconds=60)))
    assert _claim(client, bob, "lab") is None  # bob's worker, live, advertising 'lab'
    assert _claim(client, tokens["worker"], "lab") is None  # a fleet worker too
    line = repo.waiting_on_workers(session, search_id=search_id, live_s=30.0)
    assert line is not None and "with no live worker for it" in line, line
    assert "advertise lab but their tokens resolve it to another cluster" in line
    # Her own worker, live (a poll, no claim): the trial is just waiting its turn.
    me = client.get(f"{API}/me", headers=alice).json()["user_id"]
    repo.touch_worker(session, name="alices-box", user_id=me, clusters=["lab"], pool="testbed")
    assert repo.waiting_on_workers(session, search_id=search_id, live_s=30.0) is None


def test_two_users_own_workers_each_run_only_their_lab(
    tmp_path: Path, zoo_dir: Path, specs: Any, wait_for: Callable[..., Any]
) -> None:
    """Real processes: `strategist serve`'s API and loop, and two testbed workers started with the
    users' own tokens, both advertising 'lab' at once; each search's trials are all measured by its
    owner's worker, on the owner's spec."""
    settings = Settings(
        data_dir=tmp_path / "data", database_url="", broker_url="", heartbeat_timeout_s=30.0,
        sweep_interval_s=0.5,
    )  # fmt: skip
    with Stack(settings, StackConfig(embedded_worker=False, port=0, tick_s=0.3)) as stack:
        with stack.sessions() as s:
            secrets = {who: repo.create_token(s, name=who, role="user").secret for who in ("alice", "bob")}
        http = httpx.Client(base_url=stack.url + API, timeout=60)
        searches: dict[str, int] = {}
        for who, nic in (("alice", 10), ("bob", 25)):
            auth = {"Authorization": f"Bearer {secrets[who]}"}
            assert http.post("/clusters", json=_lab(specs, nic), headers=auth).status_code == 201
            body = {"model": "tiny-mlp", "cluster": "lab", "trial_budget": 1, "candidates_per_round": 1,
                    "samples_per_round": 20}  # fmt: skip
            r = http.post("/searches", json=body, headers=auth)
            assert r.status_code == 201, r.text
            searches[who] = r.json()["id"]
        procs = []
        for who in ("alice", "bob"):
            flags = {"poll": 0.3, "clusters": "lab", "name": f"{who}-box", "iterations": 3, "warmup": 1}
            with (tmp_path / f"{who}.log").open("wb") as out:
                argv = embedded_worker_argv(api=stack.url, broker="", flags=flags)
                procs.append(subprocess.Popen(argv, env=worker_env(secrets[who]), stdout=out, stderr=out))
        try:
            for who, sid in searches.items():
                auth = {"Authorization": f"Bearer {secrets[who]}"}

                def done(sid: int = sid, auth: dict[str, str] = auth) -> bool:
                    state = http.get(f"/searches/{sid}", headers=auth).json()["search"]["state"]
                    assert state not in ("failed", "cancelled"), state
                    return bool(state == "completed")

                wait_for(done, 300, f"{who}'s search to complete")
                trials = http.get(f"/searches/{sid}/trials", headers=auth).json()["data"]
                assert trials and {t["state"] for t in trials} == {"succeeded"}
                assert {t["claimed_by"] for t in trials} == {f"{who}-box"}, trials
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=30)
            http.close()
