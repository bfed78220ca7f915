"""PipelineConfig composes the executor's ExecutorConfig: dilation, probe, validation (issue 17)."""

from __future__ import annotations

import pytest
import torch

from runtime.executor import ExecutorConfig, LocalLauncher
from runtime.executor.reference import linear, two_by_two
from runtime.pipeline import PipelineConfig, run_pipeline
from runtime.pipeline.run import _replay_job
from runtime.pipeline.stage_net import ReplayStageNet
from simulator.pipeline.cost import stage_compute_seconds
from simulator.spec import ModelSpec, Plan, Stage
from simulator.spec.profile import LayerTime, Profile


def model() -> ModelSpec:
    return ModelSpec(name="mlp", batch_size=4, layers=tuple(linear(f"l{i}", 6, 6) for i in range(4)))


def plan(k: int = 2) -> Plan:
    return Plan(
        stages=(
            Stage(first_layer=0, last_layer=2, devices=("n0:0",)),
            Stage(first_layer=2, last_layer=4, devices=("n1:0",)),
        ),
        global_batch=8,
        batch_shares={"n0:0": 8},
        micro_batch_size=2,
        num_micro_batches=4,
        schedule="kfkb",
        k=k,
    )


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"PipelineConfig\.executor\.backend"):
        PipelineConfig(ExecutorConfig(backend="nccl"))
    with pytest.raises(ValueError, match=r"PipelineConfig\.dtype"):
        PipelineConfig(dtype="float16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ExecutorConfig\.dilation"):
        PipelineConfig(ExecutorConfig(compute="real", dilation=2.0))
    job = PipelineConfig(ExecutorConfig(compute="replay", dilation=3.0), dtype="float64").job()
    assert job["dilation"] == 3.0 and job["dtype"] == "float64" and job["probe_repeats"] == 10


def test_replay_sleeps_dilated_compute() -> None:
    cfg = PipelineConfig(ExecutorConfig(compute="replay", efficiency=0.5, dilation=3.0, scale=2.0))
    job = _replay_job(model(), two_by_two(), [plan()], cfg)
    f, b = stage_compute_seconds(model(), two_by_two().device_type("n1"), 2, 4, 2, 0.5)
    assert job["fwd_seconds"][0][1] == pytest.approx(3 * f)
    assert job["bwd_seconds"][0][1] == pytest.approx(3 * b)
    assert job["out_numel"] == [3, 3]  # 6 outputs per sample, bytes / scale 2


def test_replay_uses_a_stored_profile_for_the_micro_batch() -> None:
    """Issue 15: the replay's compute is the compute model's, a profile included (as the executor's)."""
    device = two_by_two().device_type("n1").name
    times = [LayerTime(name=f"l{i}", fwd_s=0.01 * (i + 1), bwd_s=0.03 * (i + 1)) for i in range(4)]
    prof = Profile(model="mlp", device=device, batch=2, layers=tuple(times))
    cfg = PipelineConfig(ExecutorConfig(compute="replay", efficiency=0.5, dilation=3.0), profiles=(prof,))
    job = _replay_job(model(), two_by_two(), [plan()], cfg)
    assert job["fwd_seconds"][0] == pytest.approx([3 * 0.03, 3 * 0.07])  # layers 0-1, 2-3, x D
    assert job["bwd_seconds"][0] == pytest.approx([3 * 0.09, 3 * 0.21])
    # a profile for another micro-batch size is not used: the roofline, as without profiles
    other = prof.model_copy(update={"batch": 4})
    cfg = PipelineConfig(ExecutorConfig(compute="replay", efficiency=0.5), profiles=(other,))
    f, b = stage_compute_seconds(model(), two_by_two().device_type("n1"), 2, 4, 2, 0.5)
    assert _replay_job(model(), two_by_two(), [plan()], cfg)["fwd_seconds"][0][1] == pytest.approx(f)
    # the prediction from the same params is what the replay sleeps
    f2, b2 = stage_compute_seconds(
        model(), two_by_two().device_type("n1"), 2, 4, 2, params=cfg.cost_params("mlp")
    )
    assert (f2, b2) == (f, b)


def test_replay_backward_writes_no_weight_gradient() -> None:
    """The per-micro-batch weight gradient was a 15 MB zero tensor per backward for GPT stages."""
    net = ReplayStageNet(0.0, 0.0, out_numel=5, param_numel=1000)
    buffer = net.flat.grad
    assert buffer is not None
    x = torch.zeros(2, 3, requires_grad=True)
    for _ in range(3):
        y = net(x)
        y.backward(torch.ones_like(y))
    assert net.flat.grad is buffer and not buffer.any()
    assert x.grad is not None and x.grad.shape == (2, 3)


def test_dilated_replay_run_reports_real_cluster_seconds_and_the_probe() -> None:
    cfg = PipelineConfig(
        ExecutorConfig(compute="replay", warmup=0, iterations=2, dilation=2.0, probe_repeats=3)
    )
    m = run_pipeline(model(), two_by_two(), plan(), LocalLauncher(), cfg).measurements[0]
    assert m.failure is None
    env = m.environment
    assert env["dilation"] == 2.0
    # every reported time is the wall time divided by D (no warm-up: the steps tile the phase)
    assert sum(m.iteration_times) * 2.0 == pytest.approx(env["iterations_s"])
    assert set(env["per_call_overhead_s"]) == {"collective", "p2p_round"}
    assert all(v > 0 for v in env["per_call_overhead_s"].values())
