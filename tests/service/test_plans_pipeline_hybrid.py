"""Pipeline and hybrid searches without trials (issues 17, 19): 422s naming the option, the rounds and
baselines the kinds plan, the measured details a pipeline trial reports, and the dashboard pages.

The end-to-end runs with testbed trials are in test_plans_e2e.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from runtime.worker.plan_pipeline import PipelineTrial, pipeline_details
from search.pipeline import plan_memory_reasons
from search.pipeline.candidates import with_kb
from service.db import repository as repo
from service.plans.base import RoundAsk
from service.plans.hybrid import HybridPlans
from service.plans.pipeline import PipelinePlans, largest_1f1b, memory_model
from service.web.plan_views import gantt
from simulator import zoo
from simulator.spec import HybridPlan, Plan
from simulator.spec.measurement import Measurement

API = "/api/v1"


def create(client: TestClient, headers: dict[str, str], **body: Any) -> Any:
    return client.post(f"{API}/searches", json={"trial_budget": 1, **body}, headers=headers)


@pytest.mark.parametrize(
    ("model", "cluster", "kind", "options", "loc", "words"),
    [
        ("pp-chain", "pp-2", "pipeline", {"stages": 1}, ["stages"], "[2, 2]"),
        ("pp-chain", "pp-2", "pipeline", {"stages": 3}, ["stages"], '"choose"'),
        ("pp-chain", "pp-2", "pipeline", {"stages": "three"}, ["stages"], "int in"),
        ("pp-chain", "pp-2", "pipeline", {"memory_per_device_gb": 0}, ["memory_per_device_gb"], "positive"),
        ("pp-chain", "pp-2", "pipeline", {"memory_per_device_gb": -2.5}, ["memory_per_device_gb"], "positive"),
        ("pp-chain", "pp-2", "pipeline", {"memory_per_device_gb": "lots"}, ["memory_per_device_gb"], "positive"),
        ("pp-chain", "pp-2", "pipeline", {"memory_per_device_gb": 64}, ["memory_per_device_gb"], "32 GB"),
        ("pp-chain", "pp-2", "pipeline", {"stage": 2}, ["stage"], "unknown option"),
        ("pp-chain", "pp-2", "pipeline", {"global_batch": 0}, ["global_batch"], "int in"),
        ("pp-chain", "pp-2", "pipeline", {"tuner_interval": 0}, ["tuner_interval"], "int in"),
        ("mixed-net", "mixed-2", "hybrid", {"annotations": {"decoder": {"primitive": "split"}}},
         ["annotations", "decoder"], "no layer of mixed-net"),
        ("mixed-net", "mixed-2", "hybrid", {"annotations": {"classifier": {"primitive": "shard"}}},
         ["annotations", "classifier", "primitive"], "replicate"),
        ("mixed-net", "mixed-2", "hybrid", {"annotations": {"classifier": {"primitive": "split", "degree": 3}}},
         ["annotations", "classifier", "degree"], "has 2"),
        ("mixed-net", "mixed-2", "hybrid", {"annotations": ["features"]}, ["annotations"], "mapping"),
        ("mixed-net", "mixed-2", "hybrid", {"global_batch": 0}, ["global_batch"], "int in"),
    ],
)  # fmt: skip
def test_bad_plan_options_answer_422_naming_the_option(
    client: TestClient,
    tokens: dict[str, dict[str, str]],
    plan_zoo: Path,
    model: str,
    cluster: str,
    kind: str,
    options: dict[str, Any],
    loc: list[Any],
    words: str,
) -> None:
    r = create(client, tokens["alice"], model=model, cluster=cluster, plan_kind=kind, plan_options=options)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "plan_options", *loc]
    assert words in detail["msg"]


def test_stages_must_fit_the_devices_of_a_bigger_cluster(
    client: TestClient, tokens: dict[str, dict[str, str]], plan_zoo: Path
) -> None:
    """On pp-2 (2 devices, 4 layers) the stage range is [2, 2]: 'choose' and 2 are accepted."""
    for stages in ("choose", 2):
        r = create(client, tokens["alice"], model="pp-chain", cluster="pp-2", plan_kind="pipeline",
                   plan_options={"stages": stages})  # fmt: skip
        assert r.status_code == 201, r.text
        assert r.json()["plan_options"] == {
            "stages": stages,
            "memory_per_device_gb": None,
            "global_batch": 8,
            "adaptive": True,
            "tuner_interval": 2,
        }


def test_a_hybrid_search_stores_its_annotations(
    client: TestClient, tokens: dict[str, dict[str, str]], plan_zoo: Path
) -> None:
    ann = {"features": {"primitive": "replicate"}, "classifier": {"primitive": "split", "degree": 2}}
    r = create(client, tokens["alice"], model="mixed-net", cluster="mixed-2", plan_kind="hybrid",
               plan_options={"annotations": ann})  # fmt: skip
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["plan_kind"] == "hybrid"
    assert body["plan_options"]["annotations"] == ann and body["plan_options"]["global_batch"] == 16


# ------------------------------------------------------------------ the kinds' rounds


def specs(model: str, cluster: str) -> tuple[Any, Any]:
    return zoo.model(model), zoo.cluster(cluster)


def test_pipeline_round_proposes_memory_curve_points_fastest_first_and_never_twice(plan_zoo: Path) -> None:
    model, cluster = specs("pp-chain", "pp-2")
    kind = PipelinePlans()
    options = kind.validate({"memory_per_device_gb": 0.0039}, objective="time", model=model, cluster=cluster)
    memory = memory_model(model, cluster, options)
    first = kind.plan_round(model, cluster, options, RoundAsk(index=1, k=2, seed=0, tried=()))
    assert first.scorer == "pipeline-cost-model" and [d.rank for d in first.drafts] == [1, 2]
    times = [d.predicted_time for d in first.drafts]
    assert times == sorted(times) and all(math.isfinite(t) and t > 0 for t in times)
    for d in first.drafts:
        doc = PipelineTrial.model_validate(d.strategy)
        # every plan the tuner may switch to fits the memory limit (the curve), none is dominated
        assert all(not plan_memory_reasons(p, memory) for p in doc.candidates)
        kb = [(p.group_size(p.replica_micro_batches(0)), p.micro_batch_size) for p in doc.candidates]
        assert not any(a != b and b[0] >= a[0] and b[1] >= a[1] for a in kb for b in kb)
    tried = tuple(d.strategy for d in first.drafts)
    second = kind.plan_round(model, cluster, options, RoundAsk(index=2, k=5, seed=1, tried=tried))
    keys = {json.dumps(d.strategy, sort_keys=True) for d in second.drafts}
    assert not keys & {json.dumps(t, sort_keys=True) for t in tried}
    assert len(first.drafts) + len(second.drafts) == 3  # the 3.9 MB curve has three points
    everything = tried + tuple(d.strategy for d in second.drafts)
    assert kind.plan_round(model, cluster, options, RoundAsk(3, 1, 2, everything)).drafts == ()


def test_pipeline_baseline_is_1f1b_with_the_largest_micro_batch_that_fits(plan_zoo: Path) -> None:
    model, cluster = specs("pp-chain", "pp-2")
    kind = PipelinePlans()
    options = kind.validate({"memory_per_device_gb": 0.0034}, objective="time", model=model, cluster=cluster)
    memory = memory_model(model, cluster, options)
    doc = PipelineTrial.model_validate(kind.baselines(model, cluster, options, ("1f1b",))["1f1b"])
    plan = doc.plan
    assert doc.adaptive is False and plan.schedule == "1f1b" and plan.micro_batch_size == 2
    assert not plan_memory_reasons(plan, memory)
    assert plan_memory_reasons(with_kb(plan, 1, 4), memory)  # the next larger micro-batch does not fit
    assert largest_1f1b(plan, memory) == plan


def test_hybrid_rounds_put_more_samples_on_the_faster_gpu(plan_zoo: Path) -> None:
    model, cluster = specs("mixed-net", "mixed-2")
    kind = HybridPlans()
    options = kind.validate(
        {"annotations": {"features": {"primitive": "replicate"}}, "global_batch": 32},
        objective="time",
        model=model,
        cluster=cluster,
    )
    rnd = kind.plan_round(model, cluster, options, RoundAsk(index=1, k=4, seed=0, tried=()))
    plans = [HybridPlan.model_validate(d.strategy) for d in rnd.drafts]
    assert [p.name for p in plans] == ["annotated (Algorithm 1 shares)", "annotated (even shares)"]
    balanced, even = plans
    assert even.device_shares(0) == {"n0:0": 16, "n1:0": 16}
    assert balanced.device_shares(0)["n0:0"] > balanced.device_shares(0)["n1:0"]  # n0 is the V100
    assert rnd.drafts[0].predicted_time < rnd.drafts[1].predicted_time
    auto = kind.validate({}, objective="time", model=model, cluster=cluster)
    auto_round = kind.plan_round(model, cluster, auto, RoundAsk(index=1, k=4, seed=0, tried=()))
    assert auto_round.drafts and all(HybridPlan.model_validate(d.strategy) for d in auto_round.drafts)
    base = HybridPlan.model_validate(kind.baselines(model, cluster, auto, ("even",))["even"])
    assert base.device_shares(0) == {"n0:0": 8, "n1:0": 8}  # batch 8 per GPU, split evenly


# ------------------------------------------------------------------ measured details


def records(steps: list[tuple[int, float, float]], events: list[list[Any]]) -> dict[int, dict[str, Any]]:
    """Two stages' logs: stage 0 holds ``events``; stage 1 runs the same steps with no events."""
    return {
        0: {"rank": 0, "stage": 0, "replica": 0, "steps": steps, "events": events},
        1: {
            "rank": 1,
            "stage": 1,
            "replica": 0,
            "steps": [(p, a + 0.001, b + 0.002) for p, a, b in steps],
            "events": [],
        },
    }


def test_pipeline_details_follow_the_tuner_log_and_keep_the_last_steps_compute(plan_zoo: Path) -> None:
    model, cluster = specs("pp-chain", "pp-2")
    options = PipelinePlans().validate(
        {"memory_per_device_gb": 0.0034}, objective="time", model=model, cluster=cluster
    )
    doc = PipelineTrial.model_validate(
        PipelinePlans().plan_round(model, cluster, options, RoundAsk(1, 1, 0, ())).drafts[0].strategy
    )
    other = 1 - doc.start
    steps = [(doc.start, 10.0, 10.4), (doc.start, 10.4, 10.8), (other, 10.8, 11.0)]
    events = [
        ["F", 0, 10.0, 10.1],
        ["B", 0, 10.2, 10.3],
        ["F", 0, 10.8, 10.9],
        ["B", 1, 10.9, 10.95],
        ["SEND_F", 0, 10.9, 10.91],
    ]
    log = ({"step": 2, "current": doc.start, "switch_to": other, "reason": "faster"},)
    d = pipeline_details(doc, [0, 1], records(steps, events), log, dilation=2.0)
    assert d["start"]["candidate"] == doc.start and d["chosen"]["candidate"] == other
    assert d["switches"] == [
        {"step": 2, "from": {k: v for k, v in d["start"].items() if k != "candidate"},
         "to": {k: v for k, v in d["chosen"].items() if k != "candidate"}, "reason": "faster"}
    ]  # fmt: skip
    # step seconds: last end - first start over the ranks, divided by the dilation
    assert [s[0] for s in d["steps"]] == [doc.start, doc.start, other]
    assert d["steps"][2][1] == pytest.approx((11.002 - 10.8) / 2)
    # only the last step's F/B, from its start, undilated
    assert d["gantt"]["rows"] == [[0, 0, "B", 1, 0.05, 0.075], [0, 0, "F", 0, 0.0, 0.05]]
    assert d["gantt"]["seconds"] == pytest.approx(0.101)
    m = Measurement(iteration_times=(0.1,), details=d)  # the details travel in a Measurement
    assert Measurement.model_validate_json(m.model_dump_json()).details == d


def test_gantt_geometry_scales_rows_to_the_step() -> None:
    g = gantt(
        {"gantt": {"step": 3, "seconds": 0.2, "rows": [[0, 0, "F", 0, 0.0, 0.1], [0, 1, "B", 0, 0.1, 0.2]]}}
    )
    assert g is not None and g.step == 3 and [lab for _, lab in g.lanes] == ["stage 0", "stage 1"]
    f, b = g.rects
    assert (f.kind, b.kind) == ("F", "B") and f.x == pytest.approx(110.0) and b.y > f.y
    assert f.w == pytest.approx(b.w) == pytest.approx((720 - 110 - 10) / 2)
    assert gantt({}) is None


def test_trial_page_shows_the_gantt_switches_and_task_graph_table(
    client: TestClient, session: Session, tokens: dict[str, dict[str, str]], plan_zoo: Path
) -> None:
    """A measured pipeline trial and a measured hybrid trial, stored through the worker's API path."""
    model, cluster = specs("pp-chain", "pp-2")
    options = PipelinePlans().validate(
        {"memory_per_device_gb": 0.0034}, objective="time", model=model, cluster=cluster
    )
    doc = PipelinePlans().plan_round(model, cluster, options, RoundAsk(1, 1, 0, ())).drafts[0].strategy
    trial_doc = PipelineTrial.model_validate(doc)
    steps = [(trial_doc.start, 1.0, 1.3), (1 - trial_doc.start, 1.3, 1.5)]
    events = [["F", 0, 1.30, 1.35], ["F", 1, 1.35, 1.40], ["B", 0, 1.40, 1.45], ["B", 1, 1.45, 1.49]]
    log = (
        {
            "step": 1,
            "current": trial_doc.start,
            "switch_to": 1 - trial_doc.start,
            "reason": "k=… predicted faster",
        },
    )
    details = pipeline_details(trial_doc, [0, 1], records(steps, events), log, 1.0)
    hdoc = HybridPlans().plan_round(
        *specs("mixed-net", "mixed-2"),
        HybridPlans().validate({"global_batch": 32, "annotations": {"features": {"primitive": "replicate"}}},
                               objective="time", model=zoo.model("mixed-net"), cluster=zoo.cluster("mixed-2")),
        RoundAsk(1, 1, 0, ()),
    ).drafts[0].strategy  # fmt: skip
    hdetails = {"plan_kind": "hybrid", "status": "ok", "busy_s": {"n0:0": 0.0123, "n1:0": 0.0456}}
    pages = []
    for mname, cname, kind, document, det in (
        ("pp-chain", "pp-2", "pipeline", doc, details),
        ("mixed-net", "mixed-2", "hybrid", hdoc, hdetails),
    ):
        user = repo.create_token(session, name=f"owner-{kind}", role="user")
        search = repo.create_search(
            session,
            owner_id=user.info.user_id,
            model=repo.zoo_spec(session, kind="model", name=mname),
            cluster=repo.zoo_spec(session, kind="cluster", name=cname),
            plan_kind=kind,
        )
        trial = repo.enqueue_trial(session, search_id=search.id, strategy=document, baseline="b")
        claim = repo.claim_trial(session, worker="w", clusters=[cname])
        assert claim is not None and claim.trial.id == trial.id
        m = Measurement(iteration_times=(0.2, 0.21), details=det)
        assert repo.report_trial(
            session, trial_id=trial.id, attempt=1, claim_token=claim.claim_token, measurement=m
        ).recorded
        client.cookies.set("strategist_token", user.secret)
        r = client.get(f"/ui/trials/{trial.id}")
        assert r.status_code == 200, r.text
        pages.append(r.text)
        plan_page = client.get(f"/ui/trials/{trial.id}/strategy")
        assert plan_page.status_code == 200 and "plan" in plan_page.text
    pipe, hyb = pages
    chosen = details["chosen"]
    assert f"k={chosen['k']} b={chosen['b']}" in pipe and 'data-testid="gantt"' in pipe
    assert pipe.count('class="gantt-f"') == 2 and pipe.count('class="gantt-b"') == 2
    assert 'data-testid="switches"' in pipe and "predicted faster" in pipe
    assert 'data-testid="task-graphs"' in hyb and "12.3 ms" in hyb and "45.6 ms" in hyb
    shares = HybridPlan.model_validate(hdoc).device_shares(0)
    assert f'<td class="num">{shares["n0:0"]}</td>' in hyb


def test_a_pipeline_document_refuses_candidates_the_tuner_cannot_switch_between() -> None:
    """Candidates must keep the stages and global batch; the start must be one of them."""
    a = Plan.model_validate(
        {"stages": [{"first_layer": 0, "last_layer": 1, "devices": ["n0:0"]},
                    {"first_layer": 1, "last_layer": 2, "devices": ["n1:0"]}],
         "global_batch": 4, "batch_shares": {"n0:0": 4}, "micro_batch_size": 2, "num_micro_batches": 2}
    )  # fmt: skip
    assert PipelineTrial(candidates=(a,)).plan == a
    c = Plan.model_validate(
        {**a.model_dump(), "global_batch": 8, "batch_shares": {"n0:0": 8}, "num_micro_batches": 4}
    )
    with pytest.raises(ValueError, match=r"candidates\.1"):
        PipelineTrial(candidates=(a, c))
    with pytest.raises(ValueError, match="start"):
        PipelineTrial(candidates=(a,), start=1)


def test_status_reports_each_baselines_median_over_the_best_candidates(
    client: TestClient, session: Session, tokens: dict[str, dict[str, str]], plan_zoo: Path
) -> None:
    """Pipeline: 1F1B's median / the best candidate's (Ada-Grouper's comparison), through GET /searches/{id}."""
    model, cluster = specs("pp-chain", "pp-2")
    kind = PipelinePlans()
    options = kind.validate({"memory_per_device_gb": 0.0039}, objective="time", model=model, cluster=cluster)
    user = repo.create_token(session, name="carol", role="user")
    search = repo.create_search(
        session,
        owner_id=user.info.user_id,
        model=repo.zoo_spec(session, kind="model", name="pp-chain"),
        cluster=repo.zoo_spec(session, kind="cluster", name="pp-2"),
        plan_kind="pipeline",
        plan_options=options,
    )
    base = kind.baselines(model, cluster, options, ("1f1b",))["1f1b"]
    repo.enqueue_trial(session, search_id=search.id, strategy=base, baseline="1f1b")
    drafts = kind.plan_round(model, cluster, options, RoundAsk(1, 2, 0, ())).drafts
    _, cands = repo.add_round(
        session, search_id=search.id, candidates=drafts, samples=1, simulator_kind="pipeline-cost-model"
    )
    medians = iter([0.30, 0.20, 0.24])  # baseline, then the two candidates in claim order
    while (claim := repo.claim_trial(session, worker="w", clusters=["pp-2"])) is not None:
        m = Measurement(iteration_times=(next(medians),))
        repo.report_trial(
            session, trial_id=claim.trial.id, attempt=1, claim_token=claim.claim_token, measurement=m
        )
    r = client.get(f"{API}/searches/{search.id}", headers={"Authorization": f"Bearer {user.secret}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["best_time"] == 0.20 and body["speedups"] == {"1f1b": pytest.approx(0.30 / 0.20)}
    assert body["search"]["plan_kind"] == "pipeline" and body["families"] == []
    client.cookies.set("strategist_token", user.secret)
    html = client.get(f"/ui/searches/{search.id}").text  # the trials table names each plan
    assert html.count('data-testid="plan-label"') == 3 and "P=2 1f1b k=1 b=4" in html
    cand_page = client.get(f"/ui/candidates/{cands[0].id}")  # the round page's link
    assert cand_page.status_code == 200 and "memory-limit curve" in cand_page.text


def test_measurement_details_must_be_strict_json() -> None:
    """A worker's details are stored as JSON (PostgreSQL): non-finite numbers are refused by field."""
    with pytest.raises(ValueError, match="details"):
        Measurement(iteration_times=(0.1,), details={"busy_s": {"n0:0": math.inf}})


def test_dashboard_form_creates_pipeline_and_hybrid_searches_or_names_the_option(
    client: TestClient, tokens: dict[str, dict[str, str]], plan_zoo: Path
) -> None:
    secret = tokens["alice"]["Authorization"].removeprefix("Bearer ")
    client.cookies.set("strategist_token", secret)
    form = {"trial_budget": "2", "candidates_per_round": "1", "samples_per_round": "1"}
    pipe = form | {
        "model": "pp-chain",
        "cluster": "pp-2",
        "plan": "pipeline",
        "plan_options": '{"stages": 2}',
    }
    hyb = form | {"model": "mixed-net", "cluster": "mixed-2", "plan": "hybrid",
                  "plan_options": '{"annotations": {"classifier": {"primitive": "split", "degree": 2}}}'}  # fmt: skip
    made = []
    for data in (pipe, hyb):
        r = client.post("/ui/searches/new", data=data, follow_redirects=False)
        assert r.status_code == 303, r.text
        made.append(int(r.headers["location"].rsplit("/", 1)[1]))
    api = {s["id"]: s for s in client.get(f"{API}/searches", headers=tokens["alice"]).json()["data"]}
    assert [api[i]["plan_kind"] for i in made] == ["pipeline", "hybrid"]
    assert api[made[0]]["plan_options"]["stages"] == 2
    for data, text in (
        (pipe | {"plan_options": '{"stages": 3}'}, "plan_options.stages: must be an int in [2, 2]"),
        (pipe | {"plan_options": "{stages: 2}"}, "plan_options: not JSON"),
        (
            hyb | {"plan_options": '{"annotations": {"head": {"primitive": "split"}}}'},
            "plan_options.annotations.head",
        ),
        (
            form | {"model": "tiny-mlp", "cluster": "two-node", "plan_options": '{"stages": 2}'},
            "sync search takes no",
        ),
    ):
        r = client.post("/ui/searches/new", data=data, follow_redirects=False)
        assert r.status_code == 422 and text in r.text, r.text[-2000:]
    assert len(client.get(f"{API}/searches", headers=tokens["alice"]).json()["data"]) == 2


def test_stage_counts_must_divide_the_devices_and_the_batch_the_replicas() -> None:
    """On six single-GPU nodes: 4 stages leave devices over; 3 stages make 2 replicas of an odd batch."""
    from service.plans.base import OptionsInvalid
    from simulator.spec import ClusterSpec, ModelSpec

    model = zoo.model("GPT-Medium")
    gpu = {"name": "V100", "fp32_tflops": 15.7, "fp16_tflops": 125, "memory_gb": 32, "memory_bw_gbs": 900}
    nodes = [{"name": f"n{i}", "device": "V100", "gpus": 1, "nic_gbps": 10} for i in range(6)]
    cluster = ClusterSpec.model_validate(
        {"kind": "cluster", "name": "six", "device_types": [gpu], "nodes": nodes, "intra_node_gbps": 100}
    )
    assert isinstance(model, ModelSpec)
    for options, path, words in (
        ({"stages": 4}, "stages", "4 does not divide the 6 devices"),
        ({"stages": 3, "global_batch": 7}, "global_batch", "7 does not split evenly"),
    ):
        with pytest.raises(OptionsInvalid) as e:
            PipelinePlans().validate(options, objective="time", model=model, cluster=cluster)
        assert e.value.issues[0][0] == ("plan_options", path) and words in e.value.issues[0][1]
    ok = PipelinePlans().validate({"global_batch": 7}, objective="time", model=model, cluster=cluster)
    assert ok["stages"] == "choose"  # 6 stages, one replica of 7
