"""A pipeline search ranks with the compute model its trials replay with: the stored profiles
(issue 15, "the search and every benchmark use the same compute model")."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.pipeline import PipelineConfig
from search.hybrid import pipeline
from service.plans.base import RoundAsk
from service.plans.pipeline import PipelinePlans, scored_documents
from simulator import zoo
from simulator.analytical import CostParams
from simulator.hybrid import predict
from simulator.profile import ProfileStore, store_cost_params
from simulator.spec import ModelSpec
from simulator.spec.profile import LayerTime, Profile


def _profiles(model: ModelSpec, device: str, batches: range) -> list[Profile]:
    # 50 / 100 ms per layer: thousands of times the roofline's microseconds on a V100.
    return [
        Profile(model=model.name, device=device, dtype="float32", batch=b, source="test",
                layers=tuple(LayerTime(name=layer.name, fwd_s=0.05, bwd_s=0.10) for layer in model.layers))
        for b in batches
    ]  # fmt: skip


def _predicted(model, cluster, doc, params) -> float:  # type: ignore[no-untyped-def]
    plan = doc.plan
    ranges = [(st.first_layer, st.last_layer) for st in plan.stages]
    hp = pipeline(model, cluster, [st.devices for st in plan.stages], ranges, plan.global_batch,
                  plan.micro_batch_size, schedule=plan.schedule, k=plan.group_size(plan.replica_micro_batches(0)))  # fmt: skip
    return predict(model, cluster, hp, params).seconds


def test_the_ranking_takes_the_stored_profiles_the_replay_takes(
    plan_zoo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATEGIST_PROFILES", str(tmp_path / "profiles"))
    model, cluster = zoo.model("pp-chain"), zoo.cluster("pp-2")
    kind = PipelinePlans()
    options = kind.validate({"memory_per_device_gb": 0.0039}, objective="time", model=model, cluster=cluster)
    ask = RoundAsk(index=1, k=3, seed=0, tried=())
    before = kind.plan_round(model, cluster, options, ask).drafts
    assert before and max(d.predicted_time for d in before) < 0.01  # roofline: microseconds
    store = ProfileStore()
    for p in _profiles(model, cluster.device_types[0].name, range(1, options["global_batch"] + 1)):
        store.save(p)
    # the search's CostParams are the replay's (PipelineConfig.cost_params), stored profile included
    params = store_cost_params(model.name)
    assert params == PipelineConfig().cost_params(model.name)
    assert len(params.profiles) == options["global_batch"]
    after = kind.plan_round(model, cluster, options, ask).drafts
    assert min(d.predicted_time for d in after) > 0.1  # every micro-batch's layers take the profile
    for (seconds, doc), d in zip(scored_documents(model, cluster, options), after, strict=False):
        assert d.predicted_time == pytest.approx(seconds)
        assert seconds == pytest.approx(_predicted(model, cluster, doc, params))
        assert seconds > 10 * _predicted(model, cluster, doc, CostParams())


def test_given_profiles_win_over_the_store(
    plan_zoo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATEGIST_PROFILES", str(tmp_path / "profiles"))
    model, cluster = zoo.model("pp-chain"), zoo.cluster("pp-2")
    options = PipelinePlans().validate({}, objective="time", model=model, cluster=cluster)
    profiles = tuple(_profiles(model, cluster.device_types[0].name, range(1, options["global_batch"] + 1)))
    given = scored_documents(model, cluster, options, profiles=profiles)
    stored = scored_documents(model, cluster, options)
    assert min(s for s, _ in given) > 10 * max(s for s, _ in stored)


def test_the_hybrid_ranking_takes_the_stored_profiles_the_replay_takes(
    plan_zoo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.hybrid.config import HybridConfig, replay_cost_params
    from service.plans.hybrid import HybridPlans, scored_plans

    monkeypatch.setenv("STRATEGIST_PROFILES", str(tmp_path / "profiles"))
    model, cluster = zoo.model("mixed-net"), zoo.cluster("mixed-2")
    options = HybridPlans().validate({}, objective="time", model=model, cluster=cluster)
    before = scored_plans(model, cluster, options)
    assert before
    store = ProfileStore()
    for dt in cluster.device_types:
        for p in _profiles(model, dt.name, range(1, options["global_batch"] + 1)):
            store.save(p)
    params = replay_cost_params(HybridConfig(), model.name)
    assert params.profiles
    after = scored_plans(model, cluster, options)
    key = lambda p: p.model_dump_json()  # noqa: E731
    assert after and sorted(map(key, (p for _, p in after))) == sorted(map(key, (p for _, p in before)))
    for seconds, plan in after:
        assert seconds == pytest.approx(predict(model, cluster, plan, params).seconds)
        assert seconds > 10 * predict(model, cluster, plan, CostParams()).seconds
