"""Run a pipeline Plan for real: one process per (stage, replica) on the launcher's nodes, measured.

``run_pipeline(model, cluster, plans, launcher, config[, tuner])`` writes the job, starts P x D
processes of ``runtime.pipeline.worker`` (each on the node of its device, so with the testbed's
``Testbed`` launcher adjacent stages on different nodes talk over shaped links), waits for all of
them, and returns a ``PipelineRun``: one Measurement per plan (a phase: iteration k ends when the
last process finished step k; its time is end_k - end_{k-1}, the first from the latest start of the
phase), every process's event log (Gantt picture, transfer profile), the tuner's log and, in real
mode, every step's gradients.

Failures (a crash, a timeout) come back as Measurements with ``failure`` set, like the executor's;
an invalid or unsupported plan raises ``ValueError`` naming the field before any process starts.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from runtime.executor.config import ComputeMode, ExecutorConfig
from runtime.executor.probe import call_seconds
from runtime.launch import Gang, Launcher, free_port
from runtime.pipeline.stage_net import unsupported_layers
from runtime.pipeline.tuner import TunerConfig
from simulator.analytical.params import CostParams
from simulator.pipeline.cost import cut_bytes, prior_transfers, stage_compute_seconds
from simulator.spec import ClusterSpec, ModelSpec, Plan
from simulator.spec.measurement import Measurement
from simulator.spec.plan import plan_issues
from simulator.spec.profile import Profile


@dataclass(frozen=True)
class PipelineConfig:
    """How a pipeline plan is executed and measured: the executor's settings plus the element type.

    ``executor`` is the executor's own ``ExecutorConfig`` (one definition and one validation of
    compute mode, warm-up/iterations, lr, seed, timeouts, bytes ``scale``, time ``dilation``,
    ``probe_repeats``, ``efficiency``), so a pipeline trial is measured with the protocol of every
    other trial: with dilation D the replayed compute sleeps D times longer (the testbed must
    divide bandwidth by ``executor.link_scale``), every reported time is divided by D, and before
    the first step every process runs the per-call overhead probe (``runtime.executor.probe``).
    The run's deadline is ``timeout_s + startup_timeout_s``. Fields that mean nothing to a pipeline
    are not used: ``batch_size`` (the plan has its batch), ``check_memory`` (pipeline memory is the
    planner's, ``search.pipeline.plan_memory_reasons``), ``param_dump_dir``, ``teacher_seed``,
    ``crash_rank``; ``backend`` must be 'gloo'.
    """

    executor: ExecutorConfig = field(default_factory=lambda: ExecutorConfig(compute="real"))
    # Element type of parameters and activations ('float64' for exact gradient comparisons).
    dtype: Literal["float32", "float64"] = "float32"
    # Replay: measured profiles the compute model uses for their (model, device, dtype, micro-batch)
    # key; None = the profile store's profiles of the model, as ``ExecutorSession`` does (issue 15:
    # one compute model for the search, the cost model and every replay).
    profiles: tuple[Profile, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.executor, ExecutorConfig):
            raise ValueError(f"PipelineConfig.executor: must be an ExecutorConfig, got {self.executor!r}")
        if self.executor.backend != "gloo":
            raise ValueError(
                f"PipelineConfig.executor.backend: pipeline plans run on gloo only, got {self.executor.backend!r}"
            )
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"PipelineConfig.dtype: must be 'float32' or 'float64', got {self.dtype!r}")

    @property
    def compute(self) -> ComputeMode:
        return self.executor.compute

    @property
    def dilation(self) -> float:
        return self.executor.dilation

    @property
    def scale(self) -> float:
        return self.executor.scale

    def cost_params(self, model_name: str) -> CostParams:
        """The CostParams the replay computes with (and a prediction of it should use):
        ``executor.efficiency`` and the profiles (``profiles``, else the store's for the model);
        op efficiencies and per-type corrections are CostParams' defaults, as in the executor's
        replay (``runtime.executor.worker.layer_seconds``)."""
        from simulator.profile.store import store_cost_params

        return store_cost_params(model_name, self.executor.efficiency, self.profiles)

    def job(self) -> dict[str, Any]:
        """What every process reads: the executor's fields flat, plus ``dtype``."""
        return {**asdict(self.executor), "dtype": self.dtype}


@dataclass(frozen=True)
class PipelineRun:
    """What one pipeline run measured; ``records[rank]`` is that process's rank<R>.json."""

    measurements: tuple[Measurement, ...]  # one per phase (plan), in order
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    grads: dict[int, list[dict[str, torch.Tensor]]] = field(default_factory=dict)  # real mode, per rank
    params: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    # With a tuner: every evaluation (step, current, predicted seconds per candidate, switch, reason).
    tuner_log: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class TunerRun:
    """Run the online auto-tuner over the candidates for ``steps`` steps, starting on ``start``."""

    steps: int
    start: int = 0
    config: TunerConfig = field(default_factory=TunerConfig)


def unsupported_plan_reason(model: ModelSpec, plan: Plan) -> str | None:
    """Why this executor cannot run ``plan`` (None if it can); the plan itself is valid."""
    reps = {st.replicate for st in plan.stages}
    if len(reps) != 1:
        return f"plan.stages: every stage needs the same replicate degree (got {sorted(reps)})"
    for i, st in enumerate(plan.stages):
        if st.split != 1:
            return f"plan.stages.{i}.split: tensor splits are not executed yet (split {st.split})"
    for d in range(plan.stages[0].replicate):
        if plan.replica_micro_batches(d) < 1:
            dev = plan.stages[0].devices[d]
            return f"plan.batch_shares.{dev}: pipeline replica {d} has no micro-batch"
    return None


def _replay_job(
    model: ModelSpec, cluster: ClusterSpec, plans: Sequence[Plan], cfg: PipelineConfig
) -> dict[str, Any]:
    """Per plan and stage: (forward, backward) seconds slept per micro-batch (the compute model's
    times × dilation); per stage: tensor sizes (bytes / scale)."""
    ex = cfg.executor
    params = cfg.cost_params(model.name)
    stages = plans[0].stages
    fwd = [[0.0] * len(stages) for _ in plans]
    bwd = [[0.0] * len(stages) for _ in plans]
    out, par = [], []
    for s, st in enumerate(stages):
        device = cluster.device_type(st.devices[0].rpartition(":")[0])
        for i, plan in enumerate(plans):
            f, b = stage_compute_seconds(
                model, device, st.first_layer, st.last_layer, plan.micro_batch_size, params=params
            )
            fwd[i][s], bwd[i][s] = f * ex.dilation, b * ex.dilation
        last = st.last_layer == len(model.layers)  # the model's output: the loss's input, not sent
        out_bytes = model.layers[-1].activation_bytes if last else cut_bytes(model, st.last_layer)
        out.append(max(1, math.ceil(out_bytes / 4 / ex.scale)))
        pbytes = sum(
            v.bytes for layer in model.layers[st.first_layer : st.last_layer] for v in layer.variables
        )
        par.append(max(1, math.ceil(pbytes / 4 / ex.scale)))
    return {"fwd_seconds": fwd, "bwd_seconds": bwd, "out_numel": out, "param_numel": par}


def run_pipeline(
    model: ModelSpec,
    cluster: ClusterSpec,
    plans: Plan | Sequence[Plan],
    launcher: Launcher,
    config: PipelineConfig,
    tuner: TunerRun | None = None,
    recompute: Collection[int] = (),
) -> PipelineRun:
    """Run ``plans`` (phases with the same stages and global batch) on ``launcher``'s nodes.

    Without ``tuner`` every plan runs ``warmup + iterations`` steps in turn (one Measurement each).
    With it, ``plans`` are the tuner's candidates: ``tuner.steps`` steps starting on candidate
    ``tuner.start``, switching online (one Measurement over all steps; ``PipelineRun.tuner_log``).
    ``recompute``: indices of the plans run with re-materialisation (``stage_net.Recompute``: each
    stage keeps its input per micro-batch and re-runs its forward in the backward, as GPipe does;
    its memory is ``search.pipeline.plan_memory(..., recompute=True)``); not with ``tuner``.
    """
    phases = [plans] if isinstance(plans, Plan) else list(plans)
    if not phases:
        raise ValueError("plans: at least one plan is needed")
    plan = phases[0]
    for i, p in enumerate(phases):
        issues = plan_issues(p, model, cluster)
        if issues:
            raise ValueError(f"invalid plan: plans.{i}.{issues[0]}")
        reason = unsupported_plan_reason(model, p)
        if reason is None and config.compute == "real" and unsupported_layers(model):
            reason = f"real pipeline compute cannot run embedding layers {unsupported_layers(model)}"
        if reason is None and (p.stages != plan.stages or p.global_batch != plan.global_batch):
            reason = f"plans.{i}: every phase must keep the stages and global batch of plans.0"
        if reason:
            raise ValueError(f"unsupported: {reason}")
    remat = sorted(set(recompute))
    if remat and tuner is not None:
        raise ValueError("recompute: the tuner's candidates run without re-materialisation")
    if any(not 0 <= i < len(phases) for i in remat):
        raise ValueError(f"recompute: {remat} are not all indices of plans")
    P, D = len(plan.stages), plan.stages[0].replicate
    job: dict[str, Any] = {
        "model": model.model_dump(mode="json"),
        "plans": [p.model_dump(mode="json") for p in phases],
        "config": config.job(),
        "tuner": None,
        "recompute": remat,
    }
    if tuner is not None:
        if not 0 <= tuner.start < len(phases):
            raise ValueError(f"tuner.start: {tuner.start} is not an index of plans")
        if tuner.steps < 1:
            raise ValueError(f"tuner.steps: must be >= 1, got {tuner.steps}")
        job["tuner"] = {"config": asdict(tuner.config), "start": tuner.start, "steps": tuner.steps}
        shaped = (getattr(launcher, "environment", None) or {}).get("shaped", True)
        if (
            config.compute == "replay"
            and shaped
            and getattr(launcher, "scale", None) == config.executor.link_scale
        ):
            # links shaped as the replay assumes: a message takes at least bytes / bandwidth x D
            job["tuner"]["floors"] = {
                str(p.micro_batch_size): [
                    [a, c, t * config.executor.dilation]
                    for (a, c), t in prior_transfers(model, cluster, p).items()
                ]
                for p in phases
            }
    if config.compute == "replay":
        job["replay"] = _replay_job(model, cluster, phases, config)
    nodes = [
        cluster.node_index[plan.stages[rank % P].devices[rank // P].rpartition(":")[0]]
        for rank in range(P * D)
    ]
    with tempfile.TemporaryDirectory(prefix="strategist-pp-") as tmp:
        out = Path(tmp)
        (out / "job.json").write_text(json.dumps(job))
        master, port = launcher.address(nodes[0]), free_port()
        started = time.monotonic()

        def argv(rank: int) -> list[str]:
            return [sys.executable, "-m", "runtime.pipeline.worker", "--job", str(out), "--rank", str(rank),
                    "--master", master, "--port", str(port)]  # fmt: skip

        with Gang(launcher, nodes, argv, port=port) as gang:
            ended = gang.wait(
                started + config.executor.timeout_s + config.executor.startup_timeout_s,
                timeout_reason="timeout: the pipeline run took longer than its timeout_s",
                poll_s=0.05,
            )
        if not ended.ok:
            failed = Measurement(failure=ended.reason, compute_mode=config.compute, scale=config.scale)
            return PipelineRun((failed,) * (1 if tuner else len(phases)))
        records = {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(P * D)}
        grads: dict[int, list[dict[str, torch.Tensor]]] = {}
        params: dict[int, dict[str, torch.Tensor]] = {}
        if config.compute == "real":
            for r in range(P * D):
                blob = torch.load(out / f"rank{r}.pt")
                grads[r], params[r] = blob["grads"], blob["params"]
    if tuner is None:
        measured = tuple(_measure(records, phase, config, launcher) for phase in range(len(phases)))
    else:
        measured = (_measure(records, None, config, launcher),)
    return PipelineRun(measured, records, grads, params, tuple(records[0].get("tuner") or ()))


def _measure(
    records: dict[int, dict[str, Any]], phase: int | None, cfg: PipelineConfig, launcher: Launcher
) -> Measurement:
    """Phase ``phase``'s Measurement (its steps only; a barrier separates phases), or all steps.

    As the executor's (``runtime.executor.results.aggregate``): every time is divided by the
    dilation D; ``environment`` holds ``dilation``, ``iterations_s`` (undilated wall time of the
    phase's steps) and ``per_call_overhead_s``: the probe's medians divided by D, ``collective``
    (1-element all-reduce over all processes) and ``p2p_round`` (1-element exchange with both
    neighbour stages), measured on the run's processes before its first step.
    """
    d = cfg.dilation
    mine = {r: [st for st in rec["steps"] if phase is None or st[0] == phase] for r, rec in records.items()}
    steps = len(mine[0])
    ends = [max(m[i][2] for m in mine.values()) for i in range(steps)]
    start = max(m[0][1] for m in mine.values())
    bounds = [start, *ends]
    times = [(bounds[i + 1] - bounds[i]) / d for i in range(steps)]
    compute = []
    for i in range(steps):
        busy = []
        for r, rec in records.items():
            _, t0, t1 = mine[r][i]
            busy.append(sum(e - s for k, _, s, e in rec["events"] if k in ("F", "B") and t0 <= s < t1))
        compute.append(sum(busy) / len(busy) / d)
    overhead = {}
    for kind in ("collective", "p2p_round"):
        calls = call_seconds([rec["probe"][kind] for rec in records.values() if rec.get("probe")])
        if calls:
            overhead[kind] = statistics.median(calls) / d
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "launcher": type(launcher).__name__,
        "iterations_s": ends[-1] - start,
        "dilation": d,
        "per_call_overhead_s": overhead,
    }
    extra = getattr(launcher, "environment", None)
    if isinstance(extra, dict):
        env["launcher_environment"] = extra
    w = cfg.executor.warmup
    return Measurement(
        iteration_times=tuple(times[w:]),
        compute_times=tuple(compute[w:]),
        sync_wait_times=tuple(max(0.0, t - c) for t, c in zip(times[w:], compute[w:], strict=True)),
        warmup=w,
        scale=cfg.scale,
        compute_mode=cfg.executor.compute,
        backend="gloo",
        environment=env,
    )
