"""Where runtimes were measured (issue 41): every record says its site (real cluster or testbed, GPU
types, torchrun run id), GET /runtimes shows it, and one domain's simulator retraining never mixes
testbed and real-cluster runtimes (``service.loop.simulators.one_site``: the real ones when present,
said in the version's notes)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.db import repository as repo
from service.db.models import RuntimeRecordRow
from service.loop.simulators import _TransferRetrain, one_site
from simulator.spec.measurement import Measurement, measured_on

API = "/api/v1"
TESTBED_ENV = {"launcher": "Testbed", "testbed": "netns", "shaped": True}


def agent_env(run_id: str, site: str = "cluster") -> dict[str, Any]:
    """What an agent writes (runtime.agent.node.Agent.environment)."""
    on = {"site": site, "pool": "lab", "gpu_types": ["A100"], "torchrun_run_id": run_id}
    return {"launcher": "torchrun", "torchrun_run_id": run_id, "measured_on": on}


def _measured(
    session: Session, search_id: int, specs: Any, envs: list[dict[str, Any]], tag: str
) -> list[int]:
    """One trial per environment, claimed and reported with it; the trial ids."""
    ids = []
    for i, env in enumerate(envs):
        t = repo.enqueue_trial(session, search_id=search_id, strategy=specs.strategy(f"{tag}{i}", group=i % 3),
                               baseline=f"{tag}{i}")  # fmt: skip
        claim = repo.claim_trial(session, worker="w", clusters=["two-node"])
        assert claim is not None and claim.trial.id == t.id
        m = Measurement(iteration_times=(0.5 + i / 10, 0.4 + i / 10), environment=env)
        assert repo.report_trial(session, trial_id=t.id, attempt=claim.attempt, claim_token=claim.claim_token,
                                 measurement=m).recorded  # fmt: skip
        ids.append(t.id)
    return ids


def test_the_site_rule() -> None:
    assert measured_on(TESTBED_ENV) is not None and measured_on(TESTBED_ENV).site == "testbed"  # type: ignore[union-attr]
    assert measured_on({"launcher": "local", "pool": "gpu"}).site == "cluster"  # type: ignore[union-attr]
    on = measured_on(agent_env("trial3-1"))
    assert on is not None and (on.site, on.pool, on.gpu_types, on.torchrun_run_id) == (
        "cluster", "lab", ("A100",), "trial3-1")  # fmt: skip
    assert measured_on({"launcher": "LocalLauncher"}) is None  # unknown: never guessed
    assert measured_on({"measured_on": {"site": "moon"}}) is None


def test_records_say_where_and_retraining_uses_one_site_per_domain(
    session: Session, sessions: sessionmaker[Session], search_of: Any, specs: Any
) -> None:
    search = search_of()
    testbed = _measured(session, search.id, specs, [TESTBED_ENV, TESTBED_ENV, {"launcher": "x"}], "t")
    real = _measured(session, search.id, specs, [agent_env("trialA-1"), agent_env("trialB-1")], "r")
    with session.begin():
        rows = {r.trial_id: r for r in session.scalars(select(RuntimeRecordRow))}
    assert [rows[t].measured_on["site"] for t in testbed[:2]] == ["testbed", "testbed"]
    assert rows[testbed[2]].measured_on is None
    assert [rows[t].measured_on for t in real] == [
        {"site": "cluster", "pool": "lab", "gpu_types": ["A100"], "torchrun_run_id": f"trial{x}-1"}
        for x in "AB"
    ]
    records = repo.list_runtimes(session, domain=search.domain)
    kept, note = one_site(records)
    assert sorted(r.trial_id for r in kept) == sorted(real)
    assert (
        note["site"] == "cluster"
        and note["left_out"] == {"testbed": 3}
        and "one site per domain" in note["note"]
    )
    # Testbed only: all of them, and the note says which did not say where they were measured.
    only, note = one_site([r for r in records if r.trial_id in testbed])
    assert len(only) == 3 and note["site"] == "testbed" and note["unrecorded_as_testbed"] == 1
    # The transfer retraining's training set of the domain holds the real cluster's runtimes only.
    sites: dict[str, dict[str, Any]] = {}
    sets = _TransferRetrain.sets(sessions, (), (), sites)
    (mine,) = [t for t in sets if t.label == f"service/{search.domain}"]
    assert sorted(mine.runtime_record_ids) == sorted(rows[t].id for t in real)
    assert sites[search.domain]["left_out"] == {"testbed": 3}


def test_runtimes_api_shows_the_site(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    body = {"model": "tiny-mlp", "cluster": "two-node", "strategy": specs.strategy("mine"),
            "iteration_times": [0.3, 0.2]}  # fmt: skip
    on = {"site": "cluster", "pool": None, "gpu_types": ["H100"], "torchrun_run_id": None}
    r = client.post(f"{API}/runtimes", json={**body, "measured_on": on}, headers=tokens["alice"])
    assert r.status_code == 201, r.text
    assert (r.json()["site"], r.json()["measured_on"]) == ("cluster", on)
    assert client.post(f"{API}/runtimes", json=body, headers=tokens["alice"]).status_code == 201
    bad = client.post(
        f"{API}/runtimes", json={**body, "measured_on": {"site": "moon"}}, headers=tokens["alice"]
    )
    assert bad.status_code == 422 and "measured_on" in bad.text
    listed = client.get(f"{API}/runtimes", headers=tokens["alice"]).json()["data"]
    assert [x["site"] for x in listed] == ["cluster", None]
