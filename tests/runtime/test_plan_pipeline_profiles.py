"""A pipeline trial's runner replays with its session's measured profiles (issue 15: one compute
model for the search, the cost model and every replay)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import runtime.pipeline
from runtime.executor import ExecutorConfig
from runtime.executor.reference import GPU
from runtime.worker.plan_pipeline import PipelineTrial, run
from simulator.analytical.compute import layer_times
from simulator.spec import Layer, ModelSpec, Plan, Stage, Variable
from simulator.spec.profile import LayerTime, Profile


def _model() -> ModelSpec:
    layers = tuple(
        Layer(name=f"l{i}", kind="linear", fwd_flops=2.0 * 8 * 8, activation_bytes=32.0,
              variables=(Variable(name=f"l{i}.w", shape=(8, 8)),), inputs=(f"l{i - 1}",) if i else ())
        for i in range(2)
    )  # fmt: skip
    return ModelSpec(name="pp-toy", batch_size=4, layers=layers)


def test_the_runner_replays_with_the_sessions_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    profile = Profile(model=model.name, device=GPU.name, dtype="float32", batch=2, source="test",
                      layers=tuple(LayerTime(name=layer.name, fwd_s=0.05, bwd_s=0.1) for layer in model.layers))  # fmt: skip
    seen: list[Any] = []

    def fake_run_pipeline(
        model_: Any, cluster: Any, plans: Any, launcher: Any, cfg: Any, tuner: Any = None
    ) -> Any:
        seen.append(cfg)
        raise ValueError("stop here: the config is what is checked")

    monkeypatch.setattr(runtime.pipeline, "run_pipeline", fake_run_pipeline)
    session = SimpleNamespace(config=ExecutorConfig(compute="replay"), profiles=(profile,), launcher=None)
    context = SimpleNamespace(model=model, cluster=None, session=lambda: session)
    plan = Plan(
        stages=(Stage(first_layer=0, last_layer=1, devices=("n0:0",)),
                Stage(first_layer=1, last_layer=2, devices=("n1:0",))),
        global_batch=4, batch_shares={"n0:0": 4, "n1:0": 0}, micro_batch_size=2, num_micro_batches=2,
    )  # fmt: skip
    doc = PipelineTrial(candidates=(plan,), adaptive=False).model_dump(mode="json")
    m = run(doc, context)  # type: ignore[arg-type]
    assert m.failure == "stop here: the config is what is checked"
    (cfg,) = seen
    assert cfg.profiles == (profile,)
    # the replay's per-layer seconds at the micro-batch are the profile's, not the roofline's
    t = layer_times(model, GPU, 2, cfg.cost_params(model.name))
    assert t.source == "profile" and t.step == pytest.approx(2 * 0.15)
