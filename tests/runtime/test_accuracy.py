"""Time-to-accuracy check (runtime/accuracy.py): a learnable teacher task, carried-over compressors, verdicts."""

from __future__ import annotations

import pytest
import torch

from runtime.accuracy import (
    carry_compression,
    check_curves,
    smooth,
    teacher_task,
    time_to_accuracy,
)
from runtime.executor.model import SpecNet
from runtime.executor.reference import GPU
from simulator.spec import ClusterSpec, CollectiveSync, Compressor, Node, Strategy, VariableStrategy


def _sgd_losses(teacher_seed: int | None, steps: int = 80) -> list[float]:
    net = SpecNet(teacher_task(), 1, torch.device("cpu"), teacher_seed=teacher_seed)
    out = []
    for it in range(steps):
        loss = net.loss(net.global_batch(it, 1, 32, torch.device("cpu")))
        grads = torch.autograd.grad(loss, net.params)
        with torch.no_grad():
            for p, g in zip(net.params, grads, strict=True):
                p.sub_(g, alpha=0.05)
        out.append(float(loss.detach()))
    return smooth(out, 10)


def test_the_teacher_task_is_learnable_and_noise_is_not() -> None:
    taught, noise = _sgd_losses(2), _sgd_losses(None)
    assert taught[-1] < 0.3 * taught[0] and taught[-1] < 0.25  # the student learns the teacher
    # unit-variance random targets: nothing to learn below their variance (why the check needs a teacher)
    assert noise[-1] > 0.95


def _uniform(comp: Compressor, name: str) -> Strategy:
    task = teacher_task()
    return Strategy(
        name=name,
        variables=tuple(
            VariableStrategy(variable=v.name, shards=(CollectiveSync(compressor=comp),))
            for v in task.variables
        ),
    )


def _comp(vs: VariableStrategy) -> Compressor:
    sync = vs.shards[0]
    assert isinstance(sync, CollectiveSync)
    return sync.compressor


def test_carry_compression_takes_the_least_accurate_choice() -> None:
    task = teacher_task()
    mixed = _uniform(Compressor(kind="fp16"), "mixed").model_copy(
        update={
            "variables": (
                VariableStrategy(variable="fc0.w", shards=(CollectiveSync(compressor=Compressor(kind="powersgd", rank=4)),)),
                VariableStrategy(variable="fc0.b", shards=(CollectiveSync(compressor=Compressor(kind="fp16")),)),
                VariableStrategy(variable="fc1.w", shards=(CollectiveSync(compressor=Compressor(kind="powersgd", rank=2)),)),
                *_uniform(Compressor(), "x").variables[3:],
            )
        }
    )  # fmt: skip
    carried = {vs.variable: _comp(vs) for vs in carry_compression(mixed, task).variables}
    assert carried["fc0.w"] == carried["fc2.w"] == Compressor(kind="powersgd", rank=2)  # fc2.w is 8x64
    assert carried["fc0.b"] == Compressor(kind="fp16")
    lossless = carry_compression(None, task)
    assert {_comp(vs).kind for vs in lossless.variables} == {"none"}


def test_verdicts_from_curves() -> None:
    lossless = [1.0, 0.6, 0.4, 0.3, 0.25, 0.2]
    ok = check_curves(lossless, [1.0, 0.7, 0.5, 0.35, 0.22, 0.21], step_times=(1.0, 0.5))
    assert ok.target == pytest.approx(0.2 + 0.05 * 0.8)
    assert (ok.lossless.steps_to_target, ok.lossy.steps_to_target) == (6, 5)
    assert ok.step_speedup == 2.0 and ok.time_to_target_speedup == pytest.approx(6 * 1.0 / (5 * 0.5))
    assert "verified" in ok.verdict()
    bad = check_curves(lossless, [1.0, 0.9, 0.8, 0.7, 0.6, 0.5], step_times=(1.0, 0.5))
    assert not bad.reached and bad.time_to_target_speedup is None and "FAILED" in bad.verdict()


@pytest.mark.slow  # ~30 s: two 40-step real runs on the executor
def test_a_real_run_on_the_executor_reaches_the_target() -> None:
    cluster = ClusterSpec(
        name="1x2", device_types=(GPU,), nodes=(Node(name="n0", device=GPU.name, gpus=2, nic_gbps=10.0),),
        intra_node_gbps=100.0,
    )  # fmt: skip
    check = time_to_accuracy(
        _uniform(Compressor(kind="fp16"), "fp16"), cluster, steps=40, step_times=(1.0, 0.9)
    )
    assert check.lossless.losses[-1] < 0.6 * check.lossless.losses[0]  # it really trained
    assert check.reached and check.lossy.steps_to_target is not None
    assert abs(check.lossy.steps_to_target - check.lossless.steps_to_target) <= 3  # type: ignore[operator]
