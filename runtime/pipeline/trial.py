"""A strategy whose ``plan`` is a pipeline, run as an executor trial (the ExecutorSession's hook).

``run_plan_trial`` runs with the executor's ``ExecutorConfig`` (``PipelineConfig`` composes it) and returns a
Measurement whose failure, if any, follows the executor's wording (``invalid strategy: ...``,
``unsupported: ...``, ``rank R exited ...``, ``timeout: ...``). The data-parallel part of the
strategy (per-variable synchronisers) is not consulted: replicas of a stage all-reduce their
gradients in one fused buffer (see ``runtime.pipeline.worker``).
"""

from __future__ import annotations

from runtime.executor.config import ExecutorConfig
from runtime.launch import Launcher
from runtime.pipeline.run import PipelineConfig, run_pipeline
from simulator.spec import ClusterSpec, ModelSpec, SpecError, Strategy
from simulator.spec.measurement import Measurement
from simulator.spec.profile import Profile


def pipeline_config(cfg: ExecutorConfig, profiles: tuple[Profile, ...] | None = None) -> PipelineConfig:
    """The pipeline settings an executor configuration stands for: that configuration itself, and
    the session's measured profiles for the replay (None: the profile store's, as the session's
    default)."""
    return PipelineConfig(executor=cfg, profiles=profiles)


def run_plan_trial(
    model: ModelSpec,
    cluster: ClusterSpec,
    strategy: Strategy,
    launcher: Launcher,
    cfg: ExecutorConfig,
    profiles: tuple[Profile, ...] | None = None,
) -> Measurement:
    """Run ``strategy.plan`` for real; failures are Measurements, never exceptions."""
    base = {"warmup": cfg.warmup, "scale": cfg.scale, "compute_mode": cfg.compute, "backend": "gloo"}
    if strategy.plan is None:
        return Measurement(failure="unsupported: the strategy has no pipeline plan", **base)
    try:
        strategy.check(model, cluster)
    except SpecError as e:
        return Measurement(failure=f"invalid strategy: {e}", **base)
    if cfg.backend != "gloo":
        return Measurement(failure="unsupported: pipeline plans run on gloo only for now", **base)
    try:
        run = run_pipeline(model, cluster, strategy.plan, launcher, pipeline_config(cfg, profiles))
    except ValueError as e:
        return Measurement(failure=str(e), **base)
    return run.measurements[0]
