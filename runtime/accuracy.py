"""Time-to-accuracy check of a lossy strategy against the lossless baseline (issue 14).

A lossy strategy (fp16, PowerSGD) is faster per step only if it still trains: its step-time
speed-up is reported together with a measured time-to-target check.

The task: a small MLP (``teacher_task``) learns a fixed *teacher* network's outputs (the same
architecture with other seeded weights; ``ExecutorConfig.teacher_seed``), on the executor in real
compute, with real synchronisation by the strategy under test. The search's model itself is far
too large for real compute on this machine, so the lossy strategy's *compressors* are carried over
to the task (``carry_compression``): PowerSGD of the smallest rank the strategy uses on every
matrix it can shrink (the least accurate choice the strategy makes), fp16 on every other shard if
the strategy uses fp16, everything in one all-reduce per layer. The lossless reference is the same
all-reduce uncompressed. This is a proxy (stated wherever it is reported): it checks that the
compressors reach the loss, not the model's own convergence.

Procedure (decisions):
1. Both runs take ``steps`` SGD steps on the same global batches and seeds; every worker's loss is
   recorded per step; a step's loss is the mean over workers, smoothed by a running mean of
   ``window`` steps (steps' batches differ).
2. Target = the lossless run's smoothed loss at its last step, plus ``slack`` (5 %) of the way
   from there back to its first loss: a loss the lossless run provably reaches.
3. Steps to target = the first step whose smoothed loss is <= target; a run that never gets there
   did not reach it (the lossy strategy fails the check).
4. Time to target = steps to target x the strategy's measured median step time *on the testbed*
   (from the search's trials: the task's own step time on loopback says nothing of the cluster).
   Time-to-target speed-up = baseline time to target / strategy time to target; step-time
   speed-up = baseline median / strategy median.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime.executor import ExecutorConfig, ExecutorSession, LocalLauncher
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    Layer,
    ModelSpec,
    Strategy,
    Variable,
    VariableStrategy,
)

#: Seeds of the student's initial weights and of the teacher (fixed: every check learns one task).
STUDENT_SEED, TEACHER_SEED = 1, 2


def teacher_task(width: int = 64, depth: int = 3, batch: int = 16) -> ModelSpec:
    """An MLP of ``depth`` linear layers ``width`` wide (tanh between), ``batch`` samples per worker."""
    layers = []
    for i in range(depth):
        out = 8 if i == depth - 1 else width
        layers.append(
            Layer(
                name=f"fc{i}",
                kind="linear",
                fwd_flops=2.0 * width * out,
                activation_bytes=4.0 * out,
                variables=(
                    Variable(name=f"fc{i}.w", shape=(out, width)),
                    Variable(name=f"fc{i}.b", shape=(out,)),
                ),
            )
        )
    return ModelSpec(name="teacher-mlp", batch_size=batch, layers=tuple(layers))


def compressors_of(strategy: Strategy) -> tuple[bool, int | None]:
    """(uses fp16, smallest PowerSGD rank used or None) over the strategy's collective shards."""
    fp16, ranks = False, []
    for vs in strategy.variables:
        for sync in vs.shards:
            if isinstance(sync, CollectiveSync):
                fp16 |= sync.compressor.kind == "fp16"
                if sync.compressor.kind == "powersgd":
                    ranks.append(sync.compressor.rank or 1)
    return fp16, min(ranks, default=None)


def carry_compression(strategy: Strategy | None, task: ModelSpec) -> Strategy:
    """The task's strategy: one all-reduce group per layer, with ``strategy``'s compressors (None:
    lossless). PowerSGD goes on matrices whose sides exceed the rank, fp16 on the rest if used."""
    fp16, rank = compressors_of(strategy) if strategy is not None else (False, None)
    subs = []
    for i, layer in enumerate(task.layers):
        for v in layer.variables:
            comp = Compressor()
            if rank is not None and len(v.shape) == 2 and rank < min(v.shape):
                comp = Compressor(kind="powersgd", rank=rank)
            elif fp16:
                comp = Compressor(kind="fp16")
            subs.append(VariableStrategy(variable=v.name, shards=(CollectiveSync(group=i, compressor=comp),)))
    name = "lossless" if strategy is None else f"{strategy.name or 'strategy'} (compressors carried over)"
    return Strategy(name=name, variables=tuple(subs))


@dataclass(frozen=True)
class Curve:
    """One training run of the task: smoothed mean loss per step and steps to the target."""

    strategy: str
    losses: tuple[float, ...]
    steps_to_target: int | None  # 1-based; None: never reached


@dataclass(frozen=True)
class AccuracyCheck:
    """The verdict: both curves, the target, and (given step times) both speed-ups."""

    target: float
    lossless: Curve
    lossy: Curve
    step_speedup: float | None  # baseline median step / lossy median step (testbed)
    time_to_target_speedup: float | None  # None if the lossy run never reached the target

    @property
    def reached(self) -> bool:
        return self.lossy.steps_to_target is not None

    def verdict(self) -> str:
        """One line for reports (the lossy report's ``accuracy`` field)."""
        if not self.reached:
            return (
                f"lossy, accuracy check FAILED: target loss {self.target:.4f} not reached in "
                f"{len(self.lossy.losses)} steps (lossless: {self.lossless.steps_to_target})"
            )
        tt = f"{self.time_to_target_speedup:.2f}x" if self.time_to_target_speedup is not None else "n/a"
        st = f"{self.step_speedup:.2f}x" if self.step_speedup is not None else "n/a"
        return (
            f"lossy, accuracy verified on the teacher task (compressors carried over): target loss "
            f"{self.target:.4f} in {self.lossy.steps_to_target} steps vs {self.lossless.steps_to_target} "
            f"lossless; step-time {st}, time-to-target {tt} vs the lossless baseline"
        )


def smooth(losses: list[float], window: int) -> list[float]:
    """Running mean over the last ``window`` steps (fewer at the start)."""
    c = np.cumsum([0.0, *losses])
    return [float((c[i + 1] - c[max(0, i + 1 - window)]) / min(window, i + 1)) for i in range(len(losses))]


def first_at_or_below(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, x in enumerate(curve) if x <= target), None)


def check_curves(
    lossless: list[float],
    lossy: list[float],
    *,
    slack: float = 0.05,
    step_times: tuple[float, float] | None = None,
    names: tuple[str, str] = ("lossless", "lossy"),
) -> AccuracyCheck:
    """The verdict from two smoothed loss curves; ``step_times`` = (baseline, lossy) medians, s."""
    target = lossless[-1] + slack * (lossless[0] - lossless[-1])
    base = Curve(names[0], tuple(lossless), first_at_or_below(lossless, target))
    test = Curve(names[1], tuple(lossy), first_at_or_below(lossy, target))
    step = tt = None
    if step_times is not None:
        step = step_times[0] / step_times[1]
        if base.steps_to_target is not None and test.steps_to_target is not None:
            tt = (base.steps_to_target * step_times[0]) / (test.steps_to_target * step_times[1])
    return AccuracyCheck(target, base, test, step, tt)


def time_to_accuracy(
    lossy: Strategy,
    cluster: ClusterSpec,
    *,
    step_times: tuple[float, float] | None = None,
    steps: int = 120,
    lr: float = 0.05,
    window: int = 10,
    slack: float = 0.05,
    task: ModelSpec | None = None,
    timeout_s: float = 300.0,
) -> AccuracyCheck:
    """Train the teacher task with ``lossy``'s compressors and losslessly on ``cluster``'s workers
    (loopback, real compute, one session), and compare the curves (module docstring)."""
    task = task or teacher_task()
    cfg = ExecutorConfig(
        compute="real",
        warmup=0,
        iterations=steps,
        lr=lr,
        seed=STUDENT_SEED,
        teacher_seed=TEACHER_SEED,
        timeout_s=timeout_s,
    )
    curves = []
    with ExecutorSession(task, cluster, LocalLauncher(), cfg) as session:
        for strategy in (carry_compression(None, task), carry_compression(lossy, task)):
            result = session.run_detailed(strategy)
            if result.measurement.failure:
                raise RuntimeError(f"time-to-accuracy run of {strategy.name!r}: {result.measurement.failure}")
            per_worker = np.asarray(list(result.losses.values()), dtype=np.float64)  # [workers, steps]
            curves.append(smooth(per_worker.mean(axis=0).tolist(), window))
    return check_curves(
        curves[0], curves[1], slack=slack, step_times=step_times, names=("lossless", lossy.name)
    )
