"""ExecutorSession runs a strategy with a pipeline plan through runtime.pipeline (issue 17 hook)."""

from __future__ import annotations

import pytest

from runtime.executor import ExecutorConfig, ExecutorSession, LocalLauncher
from runtime.executor.reference import linear, two_by_two
from simulator.spec import CollectiveSync, ModelSpec, Plan, Stage, Strategy, VariableStrategy


def model() -> ModelSpec:
    return ModelSpec(name="mlp", batch_size=4, layers=tuple(linear(f"l{i}", 6, 6) for i in range(4)))


def strategy(plan: Plan) -> Strategy:
    return Strategy(
        variables=[VariableStrategy(variable=v.name, shards=[CollectiveSync()]) for v in model().variables],
        plan=plan,
    )


def two_stage(split: int = 1, last: int = 4) -> Plan:
    devices = ("n1:0", "n1:1") if split > 1 else ("n1:0",)
    return Plan(
        stages=(
            Stage(first_layer=0, last_layer=2, devices=("n0:0",)),
            Stage(first_layer=2, last_layer=last, devices=devices, split=split),
        ),
        global_batch=8,
        batch_shares={"n0:0": 8},
        micro_batch_size=2,
        num_micro_batches=4,
        schedule="kfkb",
        k=2,
    )


@pytest.mark.parametrize(
    ("plan", "failure"),
    [
        (two_stage(last=3), "invalid strategy: plan.stages.1.last_layer: is 3, the model has 4 layers"),
        (
            two_stage(split=2),
            "unsupported: plan.stages.1.split: tensor splits are not executed yet (split 2)",
        ),
    ],
)
def test_plans_that_cannot_run_fail_with_the_field(plan: Plan, failure: str) -> None:
    with ExecutorSession(model(), two_by_two(), LocalLauncher(), ExecutorConfig(compute="real")) as session:
        m = session.run(strategy(plan))
        assert m.failure == failure
        assert not session.alive  # no data-parallel process was started for a plan


@pytest.mark.slow
def test_a_pipeline_plan_runs_as_a_trial() -> None:
    cfg = ExecutorConfig(compute="real", warmup=1, iterations=2)
    with ExecutorSession(model(), two_by_two(), LocalLauncher(), cfg) as session:
        m = session.run(strategy(two_stage()))
    assert m.failure is None
    assert len(m.iteration_times) == 2 and m.warmup == 1


def test_replay_times_follow_each_plans_micro_batch() -> None:
    from runtime.pipeline.run import PipelineConfig, _replay_job
    from simulator.pipeline.cost import stage_compute_seconds

    big, small = two_stage(), two_stage().model_copy(update={"micro_batch_size": 1, "num_micro_batches": 8})
    job = _replay_job(
        model(), two_by_two(), [big, small], PipelineConfig(ExecutorConfig(compute="replay", efficiency=0.5))
    )
    gpu = two_by_two().device_type("n1")
    for i, p in enumerate((big, small)):
        want = stage_compute_seconds(model(), gpu, 2, 4, p.micro_batch_size, 0.5)
        assert (job["fwd_seconds"][i][1], job["bwd_seconds"][i][1]) == pytest.approx(want)
    assert job["fwd_seconds"][0][1] > job["fwd_seconds"][1][1]
    assert job["out_numel"] == [6, 6]  # 4 bytes x 6 outputs per sample, scale 1
