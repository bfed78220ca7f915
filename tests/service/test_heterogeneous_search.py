"""A cost-objective (heterogeneous, HeterPS) search end to end through the API (issue 18, item 7).

The API creates the search on the zoo's CTRDNN and HeterPS-2GPU; the loop (stepped with
``advance``, its jobs in their own processes) queues the AIBox and all-GPU baselines and walks the
money vs throughput front in two rounds of two; a worker claims each trial through the API, runs
its document through the worker's dispatch (``runtime.worker.plans``) to the heterogeneous runner,
whose ``measure_plan`` is replaced by a deterministic fake (the real one is in
``test_heterogeneous_trial.py``), and reports. Every figure the API answers is recomputed here
from the cost model and the fake's rule: plans the cost model says are slower than 160,000
samples/s measure 0.6x their predicted throughput (so the cheapest predicted plan misses the
limit of 100,000 when measured), the others 0.95x.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from runtime.heterogeneous import HeterogeneousRun, StageMeasurement
from runtime.worker.plans import TrialContext, document_kind, runner
from service.loop import SearchLoop
from simulator import zoo
from simulator.analytical.heterogeneous import HeterogeneousCostModel, Workload
from simulator.spec import ResourcePlan

API = "/api/v1"
WAIT = 120.0
DATASETS = Path(__file__).resolve().parents[2] / "datasets"
LIMIT = 1e5
SLOW_BELOW = 200_000.0  # the cheapest plan at LIMIT is predicted at ~195k samples/s
STEP = 0.05  # the front walk's step: CTRDNN's front at LIMIT has 4 plans >= 5 % apart


def factor(predicted_throughput: float) -> float:
    return 0.5 if predicted_throughput < SLOW_BELOW else 0.95


def fake_measure(
    model: Any, resources: Any, plan: ResourcePlan, provisioning: Any, *, config: Any
) -> HeterogeneousRun:
    """The cost model's prediction scaled by ``factor``: money with Formula 8 at that throughput."""
    cm = HeterogeneousCostModel(model, resources, config.workload)
    report = cm.evaluate(plan)
    f = factor(report.throughput)
    b = config.workload.batch_size
    thr = report.throughput * f
    stages = tuple(
        StageMeasurement(
            resource_type=st.resource_type,
            units=st.units,
            groups=1,
            period_s=b / (s_thr * f),
            compute_s=ct * b,
            comm_s=dt * b,
            predicted_ct_s=ct * b,
            predicted_dt_s=dt * b,
        )
        for st, s_thr, ct, dt in zip(plan.stages, report.stage_throughput, report.ct, report.dt, strict=True)
    )
    return HeterogeneousRun(
        status="ok",
        throughput=thr,
        money=config.workload.samples / thr * report.price_per_hour / 3600.0,
        samples=(thr,) * (config.iterations - config.warmup),
        stages=stages,
        predicted_throughput=report.throughput,
        predicted_money=report.money,
        price_per_hour=report.price_per_hour,
        environment={"testbed": "fake"},
    )


def run_queued(client: TestClient, headers: dict[str, str]) -> list[int]:
    """Claim every queued trial through the API, run it through the worker's dispatch, report it."""
    done: list[int] = []
    while True:
        r = client.post(
            f"{API}/workers/claim", json={"clusters": ["HeterPS-2GPU"], "worker": "w"}, headers=headers
        )
        if r.status_code == 204:
            return done
        claim = r.json()
        doc = claim["trial"]["strategy"]
        assert document_kind(doc) == "heterogeneous_plan"
        context = TrialContext(
            zoo.model("CTRDNN"),
            zoo.cluster("HeterPS-2GPU"),
            {"iterations": 5, "warmup": 1, "pool": "testbed"},
        )
        m = runner(document_kind(doc))(doc, context)
        assert m.ok, m.failure
        ident = {"attempt": claim["attempt"], "claim_token": claim["claim_token"], "worker": "w"}
        r = client.post(
            f"{API}/trials/{claim['trial']['id']}/report",
            json=ident | {"measurement": m.model_dump(mode="json")},
            headers=headers,
        )
        assert r.status_code == 200 and r.json()["recorded"], r.text
        done.append(claim["trial"]["id"])


def test_cost_objective_search_runs_end_to_end_through_the_api(
    heterps_zoo: Path,
    client: TestClient,
    sessions: sessionmaker[Session],
    tokens: dict[str, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("runtime.heterogeneous.measure_plan", fake_measure)
    body = {
        "model": "CTRDNN",
        "cluster": "HeterPS-2GPU",
        "objective": "cost",
        "plan_kind": "heterogeneous",
        "plan_options": {"throughput_limit": LIMIT, "front_step": STEP},
        "trial_budget": 4,
        "candidates_per_round": 2,
        "samples_per_round": 2,
    }
    r = client.post(f"{API}/searches", json=body, headers=tokens["alice"])
    assert r.status_code == 201, r.text
    search = r.json()
    sid = search["id"]
    assert search["objective"] == "cost" and search["plan_kind"] == "heterogeneous"
    # stored with its defaults; AIBox and all-GPU meet the limit, all-CPU does not (it is left out)
    assert search["plan_options"] == {
        "throughput_limit": LIMIT,
        "scheduler": "exact",
        "batch_size": 2048,
        "samples_per_epoch": 1e9,
        "epochs": 1,
        "front_step": STEP,
        "baselines": ["aibox", "all-gpu"],
    }

    loop = SearchLoop(sessions)
    assert loop.advance(sid, wait_s=WAIT) == "baselines queued"
    assert loop.advance(sid, wait_s=WAIT) == "round 1 planned"
    assert len(run_queued(client, tokens["worker"])) == 4  # two baselines, two candidates
    assert loop.advance(sid, wait_s=WAIT) == "round 1 completed"
    assert loop.advance(sid, wait_s=WAIT) == "round 2 planned"  # no retraining for this kind
    assert len(run_queued(client, tokens["worker"])) == 2
    assert loop.advance(sid, wait_s=WAIT) == "round 2 completed"
    assert loop.advance(sid, wait_s=WAIT) == "completed"

    rounds = client.get(f"{API}/searches/{sid}/rounds", headers=tokens["alice"]).json()["data"]
    assert [(x["index"], x["state"], x["simulator_kind"]) for x in rounds] == [
        (1, "completed", "heterps-exact"),
        (2, "completed", "heterps-exact"),
    ]
    costs = client.get(f"{API}/searches/{sid}/costs", headers=tokens["alice"]).json()
    assert costs["throughput_limit"] == LIMIT and costs["scheduler"] == "exact"
    plans = costs["plans"]
    assert [p["label"].split(":")[0] for p in plans] == ["candidate"] * 4 + ["baseline"] * 2
    assert {p["baseline"] for p in plans if p["baseline"]} == {"aibox", "all-gpu"}

    cm = HeterogeneousCostModel(
        zoo.model("CTRDNN"), zoo.cluster("HeterPS-2GPU"), Workload(LIMIT, batch_size=2048)
    )
    for p in plans:
        plan = ResourcePlan.model_validate(p["plan"])
        report = cm.evaluate(plan)
        assert p["state"] == "succeeded"
        assert p["predicted_money"] == pytest.approx(report.money, rel=1e-9)
        assert p["predicted_throughput"] == pytest.approx(report.throughput, rel=1e-9)
        assert p["price_per_hour"] == pytest.approx(report.price_per_hour, rel=1e-9)
        f = factor(report.throughput)
        assert p["measured_throughput"] == pytest.approx(f * report.throughput, rel=1e-9)
        assert p["measured_money"] == pytest.approx(report.money / f, rel=1e-9)
        assert p["meets_limit"] == (f * report.throughput >= LIMIT)
        # the per-stage provisioning: every stage's type and units, as the plan has them
        assert [(s["resource_type"], s["units"]) for s in p["stages"]] == [
            (st.resource_type, st.units) for st in plan.stages
        ]
        for s, thr in zip(p["stages"], report.stage_throughput, strict=True):
            assert s["predicted_throughput"] == pytest.approx(thr, rel=1e-9)
            assert s["measured_throughput"] == pytest.approx(f * thr, rel=1e-9)
        assert math.isclose(sum(s["price_per_hour"] for s in p["stages"]), p["price_per_hour"], rel_tol=1e-9)

    cands = [p for p in plans if p["candidate_id"] is not None]
    # the front walk: each round's candidates ranked by money, each next plan >= STEP faster
    by_throughput = sorted(cands, key=lambda p: p["predicted_throughput"])
    assert [p["round_index"] for p in by_throughput] == [1, 1, 2, 2]
    assert [p["rank"] for p in by_throughput] == [1, 2, 1, 2]
    for a, b in itertools.pairwise(by_throughput):
        assert b["predicted_throughput"] >= (1 + STEP) * a["predicted_throughput"] * (1 - 1e-9)
        assert b["predicted_money"] > a["predicted_money"]
    # the first is the exact scheduler's optimum at the limit; no baseline is cheaper
    cheapest = by_throughput[0]
    assert costs["cheapest_predicted"]["label"] == cheapest["label"]
    assert all(p["predicted_money"] >= cheapest["predicted_money"] for p in plans)
    # measured, the cheapest predicted plan misses the limit: the best is the next one
    assert not cheapest["meets_limit"] and cheapest["predicted_throughput"] < SLOW_BELOW
    meeting = [p for p in plans if p["meets_limit"]]
    best = min(meeting, key=lambda p: p["measured_money"])
    assert costs["best"]["label"] == best["label"] == by_throughput[1]["label"]
    assert costs["savings"] == pytest.approx(
        {p["baseline"]: p["measured_money"] / best["measured_money"] for p in plans if p["baseline"]}
    )
    # fronts: no plan on a front is dominated by another (faster-or-equal and cheaper-or-equal)
    for key, flag in (("predicted", "on_predicted_front"), ("measured", "on_measured_front")):
        for p in plans:
            dominated = any(
                q[f"{key}_throughput"] >= p[f"{key}_throughput"]
                and q[f"{key}_money"] <= p[f"{key}_money"]
                and q is not p
                and (q[f"{key}_throughput"], q[f"{key}_money"]) != (p[f"{key}_throughput"], p[f"{key}_money"])
                for q in plans
            )
            assert p[flag] == (not dominated), (key, p["label"])

    status = client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()
    assert status["search"]["state"] == "completed"
    assert status["best_candidate_id"] == best["candidate_id"]
    assert status["best_trial_id"] == best["trial_id"]
    assert status["best_time"] == pytest.approx(2048 / best["measured_throughput"], rel=1e-9)
    assert status["families"] == [] and status["speedups"] == {}
    # the one result shape: the cheapest plan meeting the limit vs the cheapest measured baseline
    result = status["result"]
    assert result["plan_kind"] == "heterogeneous" and result["metric"] == "money"
    assert result["best"]["trial_id"] == best["trial_id"]
    assert result["best"]["value"] == pytest.approx(best["measured_money"])
    strongest = min((p for p in plans if p["baseline"]), key=lambda p: p["measured_money"])
    assert result["baseline"]["label"] == strongest["baseline"]
    assert result["ratio"] == pytest.approx(costs["savings"][strongest["baseline"]])
    assert result["slower"] == (result["ratio"] < 1)
    # heterogeneous trials are not AutoSync runtimes: none enters the simulators' training data
    runtimes = client.get(f"{API}/runtimes", headers=tokens["admin"])
    assert runtimes.status_code == 200 and runtimes.json()["count"] == 0, runtimes.text
    json.dumps(costs, allow_nan=False)  # strict JSON


def test_costs_of_a_sync_search_is_a_conflict(client: TestClient, tokens: dict[str, dict[str, str]]) -> None:
    r = client.post(
        f"{API}/searches", json={"model": "tiny-mlp", "cluster": "two-node"}, headers=tokens["alice"]
    )
    sid = r.json()["id"]
    r = client.get(f"{API}/searches/{sid}/costs", headers=tokens["alice"])
    assert r.status_code == 409 and "heterogeneous" in r.json()["detail"]
    assert client.get(f"{API}/searches/{sid}/costs", headers=tokens["bob"]).status_code == 404


def _login(client: TestClient, headers: dict[str, str]) -> None:
    secret = headers["Authorization"].removeprefix("Bearer ")
    r = client.post("/ui/login", data={"token": secret, "next": "/ui/searches"}, follow_redirects=False)
    assert r.status_code == 303


def test_dashboard_shows_money_throughput_provisioning_and_the_front(
    heterps_zoo: Path,
    client: TestClient,
    sessions: sessionmaker[Session],
    tokens: dict[str, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The create form makes a cost search; a round and the baselines are stored as the loop would
    (computed in-process), measured through the fake; the pages show what /costs answers."""
    from service.db import repository as repo
    from service.plans import RoundAsk, plan_kind

    monkeypatch.setattr("runtime.heterogeneous.measure_plan", fake_measure)
    _login(client, tokens["alice"])
    form = {"model": "CTRDNN", "cluster": "HeterPS-2GPU", "trial_budget": "3", "candidates_per_round": "3",
            "samples_per_round": "3", "objective": "cost", "throughput_limit": "1e5", "scheduler": "exact"}  # fmt: skip
    bad = client.post("/ui/searches/new", data=form | {"throughput_limit": "1e7"}, follow_redirects=False)
    assert (
        bad.status_code == 422 and "plan_options.throughput_limit: 1e+07 samples/s cannot be met" in bad.text
    )
    bad = client.post("/ui/searches/new", data=form | {"objective": "time"}, follow_redirects=False)
    assert bad.status_code == 422 and "objective: a heterogeneous search minimises money" in bad.text
    r = client.post("/ui/searches/new", data=form, follow_redirects=False)
    assert r.status_code == 303, r.text
    sid = int(r.headers["location"].rsplit("/", 1)[1])

    kind = plan_kind("heterogeneous")
    assert kind is not None
    with sessions() as s:
        search = repo.get_search(s, search_id=sid)
        assert (search.objective, search.plan_kind) == ("cost", "heterogeneous")
        assert search.plan_options is not None and search.plan_options["throughput_limit"] == LIMIT
        model, cluster = zoo.model("CTRDNN"), zoo.cluster("HeterPS-2GPU")
        for name, doc in kind.baselines(model, cluster, search.plan_options, ("aibox",)).items():
            repo.enqueue_trial(s, search_id=sid, strategy=doc, baseline=name)
        repo.transition_search(s, search_id=sid, from_states=["pending"], to_state="running")
        planned = kind.plan_round(
            model, cluster, search.plan_options, RoundAsk(index=1, k=3, seed=0, tried=())
        )
        repo.add_round(
            s, search_id=sid, candidates=list(planned.drafts), samples=3, simulator_kind=planned.scorer
        )
    assert len(run_queued(client, tokens["worker"])) == 4
    costs = client.get(f"{API}/searches/{sid}/costs", headers=tokens["alice"]).json()
    best = costs["best"]

    page = client.get(f"/ui/searches/{sid}").text
    assert 'data-testid="front-chart"' in page and "/ui/static/plotly.min.js" in page
    data = json.loads(page.split('id="front-data">')[1].split("</script>")[0])
    assert data["limit"] == LIMIT and data["best"] == best["label"]
    assert sorted(data["predicted"]["x"]) == sorted(p["predicted_throughput"] for p in costs["plans"])
    assert sorted(data["measured"]["y"]) == sorted(p["measured_money"] for p in costs["plans"])
    front = [p for p in costs["plans"] if p["on_measured_front"]]
    assert sorted(data["measured_front"]["x"]) == sorted(p["measured_throughput"] for p in front)
    assert page.count('data-testid="plan-row"') == 4
    assert f'data-testid="best-money">{best["measured_money"]:.2f} USD' in page
    # the money says for how many samples (1e9 samples per epoch, one epoch by default)
    assert 'data-testid="money-samples">for 1e+09 samples (1 epoch(s) of 1e+09)' in page
    assert f'data-testid="saving-aibox">{costs["savings"]["aibox"]:.2f}×' in page
    for p in costs["plans"]:
        stages = " | ".join(
            f"{s['first_layer']}-{s['last_layer'] - 1} {s['resource_type']} ×{s['units']}"
            for s in p["stages"]
        )
        assert stages in page
        assert f"{p['predicted_money']:.2f}" in page and f"{p['measured_money']:.2f}" in page
    assert 'data-testid="best-chart"' not in page  # the AutoSync iteration-time chart is not shown
    listing = client.get("/ui/searches").text
    assert "heterogeneous (cost)" in listing

    trial = client.get(f"/ui/trials/{best['trial_id']}")
    assert trial.status_code == 200 and 'data-testid="plan-stages"' in trial.text
    assert f'data-testid="measured-money">{best["measured_money"]:.2f} USD' in trial.text
    for s in best["stages"]:
        assert f'<td>{s["resource_type"]}</td><td class="num">{s["units"]}</td>' in trial.text
    cand = client.get(f"/ui/candidates/{best['candidate_id']}")
    assert cand.status_code == 200 and "Heterogeneous plan (exact)" in cand.text
