"""A profile uploaded through ``POST /profiles`` reaches pipeline and hybrid searches (issue 15,
"the API accepts, stores and uses a profile"): the loop hands the stored profiles of the search's
model to the kind's round, the round ranks with them, and a pipeline trial's document carries them
to the worker, whose replay config computes with them.

The on-disk profile store is an empty folder here, so a ranking that ignored the uploaded profiles
would predict with the roofline (microseconds on these small chains) and the checks below fail.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from runtime.executor import ExecutorConfig
from runtime.hybrid.config import HybridConfig, replay_cost_params
from runtime.worker import plan_hybrid, plan_pipeline
from runtime.worker.plan_pipeline import PipelineTrial
from service.loop import SearchLoop
from service.plans.hybrid import scored_plans
from service.plans.pipeline import scored_documents
from simulator import zoo
from simulator.analytical.params import CostParams
from simulator.profile.store import store_cost_params
from simulator.spec.errors import SpecError
from simulator.spec.hybrid import plan_document
from simulator.spec.measurement import Measurement
from simulator.spec.profile import Profile

API = "/api/v1"
WAIT = 120.0


def upload(client: TestClient, headers: dict[str, str], model: str, devices: list[str], batches: int) -> None:
    """Profiles of every layer of ``model`` (50 / 100 ms per layer) on each device and batch 1..batches."""
    spec = zoo.model(model)
    for device in devices:
        for b in range(1, batches + 1):
            body = {
                "kind": "profile",
                "model": model,
                "device": device,
                "dtype": "float32",
                "batch": b,
                "layers": [{"name": la.name, "fwd_s": 0.05, "bwd_s": 0.10} for la in spec.layers],
                "source": "uploaded by a test",
            }
            r = client.post(f"{API}/profiles", json=body, headers=headers)
            assert r.status_code == 201, r.text


def stored(client: TestClient, headers: dict[str, str], model: str) -> tuple[Profile, ...]:
    data = client.get(f"{API}/profiles", params={"model": model}, headers=headers).json()["data"]
    full = [client.get(f"{API}/profiles/{p['id']}", headers=headers).json() for p in reversed(data)]
    return tuple(Profile.model_validate(p["profile"]) for p in full)


def claim_all(client: TestClient, headers: dict[str, str], cluster: str) -> list[dict[str, Any]]:
    docs = []
    while True:
        r = client.post(f"{API}/workers/claim", json={"clusters": [cluster], "worker": "w"}, headers=headers)
        if r.status_code == 204:
            return docs
        docs.append(r.json()["trial"]["strategy"])


def create(client: TestClient, headers: dict[str, str], **body: Any) -> int:
    body = {"trial_budget": 2, "candidates_per_round": 2, "samples_per_round": 2, **body}
    r = client.post(f"{API}/searches", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


@pytest.fixture
def empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "disk-profiles"
    monkeypatch.setenv("STRATEGIST_PROFILES", str(folder))
    return folder


def test_a_pipeline_search_ranks_and_replays_with_the_uploaded_profile(
    client: TestClient,
    tokens: dict[str, dict[str, str]],
    sessions: sessionmaker[Session],
    plan_zoo: Path,
    empty_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, cluster = zoo.model("pp-chain"), zoo.cluster("pp-2")
    upload(client, tokens["alice"], "pp-chain", [cluster.device_types[0].name], 8)
    profiles = stored(client, tokens["alice"], "pp-chain")
    assert len(profiles) == 8
    sid = create(client, tokens["alice"], model="pp-chain", cluster="pp-2", plan_kind="pipeline",
                 plan_options={"memory_per_device_gb": 0.0039})  # fmt: skip
    loop = SearchLoop(sessions)
    assert loop.advance(sid, wait_s=WAIT) == "baselines queued"
    assert loop.advance(sid, wait_s=WAIT) == "round 1 planned"

    cands = client.get(f"{API}/searches/{sid}/candidates", headers=tokens["alice"]).json()["data"]
    assert cands
    options = client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()["search"]["plan_options"]
    roofline = dict(
        (PipelineTrial.model_validate(d.model_dump(mode="json")).model_dump_json(exclude={"profiles"}), s)
        for s, d in scored_documents(model, cluster, options)
    )
    with_upload = scored_documents(model, cluster, options, profiles=profiles)
    for c in cands:
        doc = PipelineTrial.model_validate(c["strategy"])
        assert doc.profiles == profiles  # the document carries what the round ranked with
        seconds = next(s for s, d in with_upload if d == doc)
        assert c["predicted_time"] == pytest.approx(seconds)
        assert c["predicted_time"] > 0.1 > 10 * roofline[doc.model_dump_json(exclude={"profiles"})]

    # the worker's side: every claimed trial (1F1B baseline and candidates) replays with them
    docs = claim_all(client, tokens["worker"], "pp-2")
    assert len(docs) == 1 + len(cands)
    captured: list[Any] = []

    def fake_run_pipeline(model: Any, cluster: Any, plans: Any, launcher: Any, cfg: Any, tuner: Any) -> Any:
        captured.append(cfg)
        return SimpleNamespace(measurements=[Measurement(failure="captured")])

    monkeypatch.setattr("runtime.pipeline.run_pipeline", fake_run_pipeline)
    session = SimpleNamespace(config=ExecutorConfig(), profiles=(), launcher=None)
    context: Any = SimpleNamespace(model=model, cluster=cluster, session=lambda: session)
    for doc in docs:
        assert plan_pipeline.run(doc, context).failure == "captured"
    assert len(captured) == len(docs)
    for cfg in captured:
        assert cfg.profiles == profiles
        assert cfg.cost_params(model.name) == store_cost_params(model.name, profiles=profiles)


def test_a_pipeline_document_without_profiles_replays_with_the_sessions(plan_zoo: Path) -> None:
    trial = PipelineTrial.model_validate(_one_plan_document())
    own = (_profile("m"),)
    assert trial.profiles is None and plan_pipeline.replay_profiles(trial, own) == own
    with_doc = trial.model_copy(update={"profiles": (_profile("n"),)})
    assert plan_pipeline.replay_profiles(with_doc, own) == (_profile("n"),)


def _profile(model: str) -> Profile:
    return Profile.model_validate(
        {"kind": "profile", "model": model, "device": "V100", "dtype": "float32", "batch": 1,
         "layers": [{"name": "b0", "fwd_s": 0.01, "bwd_s": 0.02}], "source": "test"}
    )  # fmt: skip


def _one_plan_document() -> dict[str, Any]:
    from service.plans.pipeline import PipelinePlans

    model, cluster = zoo.model("pp-chain"), zoo.cluster("pp-2")
    options = PipelinePlans().validate({}, objective="time", model=model, cluster=cluster)
    return scored_documents(model, cluster, options)[0][1].model_dump(mode="json")


def test_a_hybrid_search_ranks_with_the_uploaded_profile(
    client: TestClient,
    tokens: dict[str, dict[str, str]],
    sessions: sessionmaker[Session],
    plan_zoo: Path,
    empty_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from simulator.hybrid import predict

    model, cluster = zoo.model("mixed-net"), zoo.cluster("mixed-2")
    upload(client, tokens["alice"], "mixed-net", [dt.name for dt in cluster.device_types], 16)
    profiles = stored(client, tokens["alice"], "mixed-net")
    assert len(profiles) == 2 * 16
    sid = create(client, tokens["alice"], model="mixed-net", cluster="mixed-2", plan_kind="hybrid")
    loop = SearchLoop(sessions)
    assert loop.advance(sid, wait_s=WAIT) == "baselines queued"
    assert loop.advance(sid, wait_s=WAIT) == "round 1 planned"
    cands = client.get(f"{API}/searches/{sid}/candidates", headers=tokens["alice"]).json()["data"]
    assert cands
    options = client.get(f"{API}/searches/{sid}", headers=tokens["alice"]).json()["search"]["plan_options"]
    params = store_cost_params(model.name, profiles=profiles)
    ranked = scored_plans(model, cluster, options, profiles)
    for c, (seconds, plan) in zip(cands, ranked, strict=False):
        doc_plan, carried = plan_document(c["strategy"])
        assert doc_plan == plan
        assert carried == profiles  # the document carries what the round ranked with
        assert c["predicted_time"] == pytest.approx(seconds)
        assert seconds == pytest.approx(predict(model, cluster, plan, params).seconds)
        roofline = predict(model, cluster, plan, store_cost_params(model.name, profiles=())).seconds
        assert c["predicted_time"] > 10 * roofline

    # the worker's side: every claimed trial (the even baseline and the candidates) replays with
    # them, through the replay's CostParams (runtime.hybrid.replay_cost_params)
    docs = claim_all(client, tokens["worker"], "mixed-2")
    assert len(docs) == 1 + len(cands)
    captured: list[Any] = []

    def fake_measure_plan(model: Any, cluster: Any, plan: Any, **kw: Any) -> Any:
        captured.append(kw["profiles"])
        return SimpleNamespace(status="unsupported", reason="captured", measurement=None)

    monkeypatch.setattr("runtime.hybrid.testbed.measure_plan", fake_measure_plan)
    session = SimpleNamespace(config=ExecutorConfig(), profiles=(), launcher=None)
    context: Any = SimpleNamespace(model=model, cluster=cluster, session=lambda: session)
    for doc in docs:
        assert plan_hybrid.run(doc, context).failure == "unsupported: captured"
    assert captured == [profiles] * len(docs)
    # the carried profiles survive the config's JSON trip to every process and replace the store's
    cfg = HybridConfig(profiles=profiles)
    expected = CostParams(efficiency=cfg.efficiency).with_profiles(profiles)
    assert replay_cost_params(HybridConfig.from_dict(cfg.to_dict()), model.name) == expected
    assert replay_cost_params(HybridConfig(), model.name) != expected  # the (empty) store's


def test_a_hybrid_document_without_profiles_replays_with_the_sessions(plan_zoo: Path) -> None:
    from service.plans.hybrid import HybridPlans

    model, cluster = zoo.model("mixed-net"), zoo.cluster("mixed-2")
    options = HybridPlans().validate({}, objective="time", model=model, cluster=cluster)
    plan = scored_plans(model, cluster, options, ())[0][1]
    doc = plan.model_dump(mode="json")
    assert plan_document(doc) == (plan, None)
    with pytest.raises(SpecError, match="profiles"):
        plan_document({**doc, "profiles": [{"kind": "profile"}]})
