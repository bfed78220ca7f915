"""Node agents and gang claims (issue 41) on SQLite and PostgreSQL: registration, a pool as a
ClusterSpec, whole-gang hand-out under concurrent claims, partial gangs released, per-slot
heartbeats, one measurement per trial whatever is retried."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.db import repo_agents, repo_gangs
from service.db import repository as repo
from service.db.models import AgentRow, GangSlotRow, MeasurementRow, TrialRow, utcnow
from simulator.spec import DeviceType
from simulator.spec.measurement import Measurement

CPU = DeviceType(name="cpu-replay", fp32_tflops=1.0, fp16_tflops=1.0, memory_gb=8.0, memory_bw_gbs=20.0)


def _register(session: Session, name: str, pool: str = "lab", gpus: int = 1) -> None:
    repo_agents.register_agent(session, name=name, pool=pool, host=f"198.18.0.{len(name)}", rdzv_port=29400,
                               nic="veth0", nic_gbps=10.0, intra_gbps=100.0, device=CPU, gpus=gpus,
                               user_id=None)  # fmt: skip


def _pool_search(session: Session, pool: str, agents: list[str], trials: int) -> list[int]:
    """Agents registered into ``pool``, its cluster stored for alice, a search with ``trials`` queued."""
    for a in agents:
        _register(session, a, pool)
    alice = repo.create_token(session, name=f"alice-{pool}", role="user").info
    rec, spec = repo_agents.store_pool_cluster(session, pool=pool, live_s=30, owner_id=alice.user_id)
    assert [n.name for n in spec.nodes] == sorted(agents)
    model = repo.zoo_spec(session, kind="model", name="tiny-mlp")
    search = repo.create_search(session, owner_id=alice.user_id, model=model, cluster=rec)
    strategy = {"kind": "strategy", "name": "", "variables": []}
    ids = []
    for i in range(trials):
        ids.append(repo.enqueue_trial(session, search_id=search.id, strategy=strategy, baseline=f"b{i}").id)
    return ids


def _ok(attempt: int = 1) -> Measurement:
    return Measurement(iteration_times=(0.1, 0.1), environment={"attempt": attempt})


def test_pool_cluster_needs_live_agents(session: Session, zoo_dir: Any) -> None:
    from service import domain as d

    with pytest.raises(d.NotFound, match="pool 'empty' has no live agent"):
        repo_agents.pool_cluster(session, pool="empty", live_s=30)
    _register(session, "a0", gpus=2)
    _register(session, "a1", gpus=2)
    spec = repo_agents.pool_cluster(session, pool="lab", live_s=30)
    assert spec.num_gpus == 4 and [n.name for n in spec.nodes] == ["a0", "a1"]
    assert spec.device_types == (CPU,)


def test_gang_is_handed_out_whole_to_the_caller_and_its_peers(session: Session, zoo_dir: Any) -> None:
    (tid,) = _pool_search(session, "lab", ["a0", "a1"], 1)
    got = repo_gangs.claim_slot(session, agent="a1", live_s=30)
    assert got is not None and got.trial.id == tid and got.attempt == 1 and got.nnodes == 2
    assert got.agents == ("a1", "a0") and got.node_rank == 0 and got.rdzv_id == f"trial{tid}-1"
    peer = repo_gangs.claim_slot(session, agent="a0", live_s=30)
    assert peer is not None and peer.node_rank == 1 and peer.claim_token == got.claim_token
    assert got.rdzv_endpoint == peer.rdzv_endpoint == "198.18.0.2:29400"
    # Both busy: nothing more for either, and re-polling returns the same slot (redelivery).
    again = repo_gangs.claim_slot(session, agent="a0", live_s=30)
    assert again is not None and again.slot_id == peer.slot_id


def test_concurrent_claims_never_half_hold_agents(sessions: sessionmaker[Session], zoo_dir: Any) -> None:
    """4 agents, 2-node trials, 8 threads claiming at once (then each agent polls once more, as an
    agent that lost a race does), 3 rounds: every trial that runs has exactly 2 slots on 2 distinct
    agents, and no agent ever holds two slots."""
    with sessions() as s:
        _pool_search(s, "lab", ["a0", "a1"], 6)  # a 2-node pool cluster ...
        _register(s, "a2")  # ... whose pool then grows to 4 agents
        _register(s, "a3")
    for _ in range(3):
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []

        def claim(
            name: str, barrier: threading.Barrier = barrier, errors: list[BaseException] = errors
        ) -> None:
            try:
                barrier.wait()
                with sessions() as s:
                    repo_gangs.claim_slot(s, agent=name, live_s=30)
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=claim, args=(f"a{i % 4}",)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        with sessions() as s:  # an agent that lost a race polls again (PostgreSQL: SKIP LOCKED)
            for name in ("a0", "a1", "a2", "a3"):
                repo_gangs.claim_slot(s, agent=name, live_s=30)
        with sessions() as s, s.begin():
            running = s.scalars(select(TrialRow).where(TrialRow.state == "running")).all()
            slots = s.scalars(select(GangSlotRow).where(GangSlotRow.state.in_(("assigned", "joined")))).all()
            held = [a.slot_id for a in s.scalars(select(AgentRow)) if a.slot_id is not None]
            assert len(running) == 2 and len(slots) == 4 and len(set(held)) == 4
            for t in running:
                mine = [x for x in slots if x.trial_id == t.id and x.attempt == t.attempt]
                assert sorted(x.node_rank for x in mine) == [0, 1] and len({x.agent_id for x in mine}) == 2
        with sessions() as s:  # finish every slot: the agents are free for the next round
            for x in slots:
                repo_gangs.slot_done(s, slot_id=x.id, claim_token=x.claim_token, exit_code=0, reason=None)
            for t in running:
                repo.report_trial(s, trial_id=t.id, attempt=t.attempt, claim_token=str(t.claim_token),
                                  measurement=_ok())  # fmt: skip


def test_partial_gang_is_released_after_the_join_timeout(session: Session, zoo_dir: Any) -> None:
    (tid,) = _pool_search(session, "lab", ["a0", "a1"], 1)
    got = repo_gangs.claim_slot(session, agent="a0", live_s=30)
    assert got is not None
    # a1 never polls: within the timeout nothing happens, after it the attempt is abandoned.
    assert repo_gangs.release_stale_gangs(session, timeout_s=5, join_timeout_s=5) == []
    later = utcnow() + timedelta(seconds=6)
    with session.begin():  # a0 keeps beating
        session.get_one(GangSlotRow, got.slot_id).heartbeat_at = later
    out = repo_gangs.release_stale_gangs(session, timeout_s=5, join_timeout_s=5, now=later)
    assert out == [(tid, "node 1 (agent a1) did not join within 5 s")]
    ack = repo_gangs.slot_heartbeat(session, slot_id=got.slot_id, claim_token=got.claim_token)
    assert not ack.accepted
    with session.begin():
        assert session.get_one(TrialRow, tid).state == "queued"
        assert all(a.slot_id is None for a in session.scalars(select(AgentRow)))
    again = repo_gangs.claim_slot(session, agent="a1", live_s=30)
    assert again is not None and again.attempt == 2 and again.rdzv_id == f"trial{tid}-2"


def test_silent_slot_requeues_and_the_trial_is_measured_once(session: Session, zoo_dir: Any) -> None:
    (tid,) = _pool_search(session, "lab", ["a0", "a1"], 1)
    s0 = repo_gangs.claim_slot(session, agent="a0", live_s=30)
    s1 = repo_gangs.claim_slot(session, agent="a1", live_s=30)
    assert s0 is not None and s1 is not None
    # a0 keeps beating, a1 goes silent (its agent was killed).
    later = utcnow() + timedelta(seconds=6)
    with session.begin():
        session.get_one(GangSlotRow, s0.slot_id).heartbeat_at = later
    out = repo_gangs.release_stale_gangs(session, timeout_s=5, join_timeout_s=5, now=later)
    assert len(out) == 1 and out[0][1].startswith("node 1 (agent a1) silent for")
    # The survivor's late report of the abandoned attempt is not recorded.
    late = repo.report_trial(session, trial_id=tid, attempt=1, claim_token=s0.claim_token, measurement=_ok())
    assert not late.recorded
    n0 = repo_gangs.claim_slot(session, agent="a0", live_s=30)
    n1 = repo_gangs.claim_slot(session, agent="a1", live_s=30)
    assert n0 is not None and n1 is not None and n0.attempt == n1.attempt == 2
    for slot in (n0, n1):
        ack = repo_gangs.slot_heartbeat(session, slot_id=slot.slot_id, claim_token=slot.claim_token)
        assert ack.accepted and ack.nnodes == 2
        repo_gangs.slot_done(
            session, slot_id=slot.slot_id, claim_token=slot.claim_token, exit_code=0, reason=None
        )
    first = repo.report_trial(
        session, trial_id=tid, attempt=2, claim_token=n0.claim_token, measurement=_ok(2)
    )
    dup = repo.report_trial(session, trial_id=tid, attempt=2, claim_token=n0.claim_token, measurement=_ok(2))
    assert first.recorded and not dup.recorded and first.trial.state == "succeeded"
    with session.begin():
        assert len(session.scalars(select(MeasurementRow).where(MeasurementRow.trial_id == tid)).all()) == 1


def test_restarted_agent_abandons_its_attempt(session: Session, zoo_dir: Any) -> None:
    (tid,) = _pool_search(session, "lab", ["a0", "a1"], 1)
    assert repo_gangs.claim_slot(session, agent="a0", live_s=30) is not None
    assert repo_gangs.claim_slot(session, agent="a1", live_s=30) is not None
    _register(session, "a1")  # a fresh process with the same name
    out = repo_gangs.release_stale_gangs(session, timeout_s=5, join_timeout_s=5)
    assert out == [(tid, "node 1 (agent a1) left the gang: agent a1 restarted")]


def test_agent_endpoints(client: TestClient, tokens: dict[str, dict[str, str]]) -> None:
    body: dict[str, Any] = {"name": "n0", "pool": "lab", "host": "198.18.0.1", "rdzv_port": 29400,
                            "nic_gbps": 10, "device": CPU.model_dump(mode="json"), "gpus": 1}  # fmt: skip
    r = client.post("/api/v1/agents", json=body, headers=tokens["alice"])
    assert r.status_code == 403
    r = client.post("/api/v1/agents", json={**body, "rdzv_port": 0}, headers=tokens["worker"])
    assert r.status_code == 422 and "rdzv_port" in r.text
    r = client.post("/api/v1/agents", json=body, headers=tokens["worker"])
    assert r.status_code == 201 and r.json()["pool"] == "lab"
    r = client.post("/api/v1/agents", json={**body, "name": "n1"}, headers=tokens["worker"])
    r = client.get("/api/v1/agents/pools/lab/cluster", headers=tokens["alice"])
    assert r.status_code == 200 and [n["name"] for n in r.json()["nodes"]] == ["n0", "n1"]
    assert client.get("/api/v1/agents/pools/nope/cluster", headers=tokens["alice"]).status_code == 404
    r = client.post("/api/v1/agents/pools/lab/cluster", json={}, headers=tokens["alice"])
    assert r.status_code == 201 and r.json()["nodes"] == 2
    r = client.post("/api/v1/agents/n0/claim", headers=tokens["worker"])
    assert r.status_code == 204
    assert client.post("/api/v1/agents/ghost/claim", headers=tokens["worker"]).status_code == 404
    r = client.post("/api/v1/agents/slots/1/heartbeat", json={"claim_token": "x"}, headers=tokens["worker"])
    assert r.status_code == 404
    r = client.get("/api/v1/agents?pool=lab", headers=tokens["alice"])
    assert r.json()["count"] == 2 and all(a["live"] for a in r.json()["data"])
