"""Measure a HybridPlan on the heterogeneous testbed (or loopback): the benchmark's entry point.

``measure_plan(model, cluster, plan, iterations=N)`` runs the plan in replay mode: every emulated
GPU sleeps its own type's compute time (the roofline of ``simulator.analytical.compute`` for its
rows), communicates scaled tensors for real over links shaped to the cluster's NICs, and charges
its memory ledger against its type's capacity. It returns a ``HybridRun``: ``iteration_s`` (median
step), ``busy_s`` per device (median compute seconds), both in the real cluster's seconds (time
dilation divided out), or ``status == "oom"`` with the device and the allocation that did not fit.

Scale and dilation are the executor's (``runtime.testbed.dilated_scales``): bytes are divided by
``scale``, links by ``scale x dilation``, replayed compute runs ``dilation`` times longer.

Pipelined plans (``num_micro_batches > 1``) run on the pipeline issue's executor
(``runtime.pipeline.run_pipeline`` with ``plan.to_plan()`` and the same ``ExecutorConfig``). Their memory is checked before
launch with the same ledger: each device's stage parameters, gradients, optimizer state and the
kFkB stash bound ``min(N_d, (P - r) k)`` micro-batches of activations (``expected_peak_stashed``).
Limits there: that executor replays a stage's compute at its *first* device's type for every
nested replica, and refuses split stages and unequal replicate degrees.
"""

from __future__ import annotations

import contextlib
import statistics
from typing import Literal

from runtime.executor.config import ExecutorConfig
from runtime.hybrid.config import HybridConfig
from runtime.hybrid.memory import DeviceMemory, DeviceOutOfMemory
from runtime.hybrid.run import HybridRun, run_hybrid
from runtime.launch import Launcher
from simulator.memory import MemoryConfig, stage_memory, usable_bytes
from simulator.pipeline import expected_peak_stashed
from simulator.spec import ClusterSpec, HybridPlan, ModelSpec, hybrid_issues
from simulator.spec.profile import Profile

#: The planner's memory assumptions, the defaults of ``measure_plan``.
PLANNER = MemoryConfig()


def measure_plan(
    model: ModelSpec,
    cluster: ClusterSpec,
    plan: HybridPlan,
    *,
    iterations: int = 5,
    warmup: int = 1,
    testbed: bool = True,
    scale: float | None = None,
    dilation: float | None = None,
    efficiency: float = 1.0,
    memory_fraction: float = PLANNER.device_usable,
    optimizer_state_factor: float = PLANNER.state_factor,
    activation_factor: float = PLANNER.activation_factor,
    compute_dtype: Literal["float32", "tf32", "float16", "bfloat16"] | None = None,
    timeout_s: float = 600.0,
    launcher: Launcher | None = None,
    profiles: tuple[Profile, ...] | None = None,
) -> HybridRun:
    """Run ``plan`` (replay) for ``warmup + iterations`` steps; see the module docstring.

    The memory assumptions default to the planner's (``simulator.memory.MemoryConfig``: Adam's
    state 2x parameters, 90 % of a GPU usable, activation factor 1), so a plan the planner says
    fits is judged by the device with the same rules; pass the planner's values when they differ.
    ``testbed``: shaped network namespaces (falling back to unshaped loopback with a warning
    where they cannot be built); False: loopback. ``scale``/``dilation`` None: the executor's
    ``dilated_scales(cluster)``. ``launcher``: use this one (already built) instead. ``profiles``: the measured profiles the replay
    computes with (None: the profile store's, ``replay_cost_params``).
    ``compute_dtype``: the dtype whose peak the replayed compute uses (``CostParams.compute_dtype``;
    'float16' = mixed precision on tensor cores); pipelined plans replay the model's own dtype
    (``runtime.pipeline`` has no such setting) and refuse another one as ``unsupported``.
    """
    from runtime.testbed import dilated_scales, make_launcher

    if scale is None:
        scale, d = dilated_scales(cluster, dilation)
    else:
        d = dilation or 1.0
    ex = ExecutorConfig(
        compute="replay",
        warmup=warmup,
        iterations=iterations,
        scale=scale,
        dilation=d,
        efficiency=efficiency,
        timeout_s=timeout_s,
    )
    cfg = HybridConfig(
        ex,
        memory_fraction=memory_fraction,
        optimizer_state_factor=optimizer_state_factor,
        activation_factor=activation_factor,
        compute_dtype=compute_dtype,
        profiles=profiles,
    )
    issues = hybrid_issues(plan, model, cluster)
    if issues:
        return HybridRun("invalid", f"invalid plan: {issues[0]}")
    if plan.num_micro_batches > 1:
        oom = pipeline_memory_failure(model, cluster, plan, cfg)
        if oom:
            return HybridRun("oom", oom)
    with contextlib.ExitStack() as stack:
        if launcher is None:
            launcher = stack.enter_context(make_launcher(cluster, scale * d, testbed=testbed))
        if plan.num_micro_batches > 1:
            if compute_dtype is not None:
                return HybridRun(
                    "unsupported", "compute_dtype: runtime.pipeline replays the model's own dtype"
                )
            return _run_pipelined(model, cluster, plan, launcher, cfg)
        return run_hybrid(model, cluster, plan, launcher, cfg)


def pipeline_memory_failure(
    model: ModelSpec, cluster: ClusterSpec, plan: HybridPlan, cfg: HybridConfig
) -> str | None:
    """The out-of-memory reason of the first device whose ledger overflows, or None."""
    p = plan.to_plan()
    P = len(p.stages)
    for s, st in enumerate(p.stages):
        for d, dev in enumerate(st.devices):
            gpu = cluster.device_type(dev.rpartition(":")[0])
            mem = DeviceMemory(dev, gpu.name, usable_bytes(gpu, cfg.memory_fraction))
            n = p.replica_micro_batches(d)
            stash = expected_peak_stashed(P, n, p.group_size(n), s)
            need = stage_memory(
                model,
                st.first_layer,
                st.last_layer,
                stashed_samples=stash * p.micro_batch_size,
                state_factor=cfg.optimizer_state_factor,
                activation_factor=cfg.activation_factor,
            )
            try:
                mem.allocate(f"stage {s} parameters", need.params)
                mem.allocate(f"stage {s} gradients", need.grads)
                mem.allocate(f"stage {s} optimizer state", need.optimizer)
                mem.allocate(f"stage {s} activations ({stash} micro-batches of {p.micro_batch_size})",
                             need.activations)  # fmt: skip
            except DeviceOutOfMemory as e:
                return str(e)
    return None


def _run_pipelined(
    model: ModelSpec, cluster: ClusterSpec, plan: HybridPlan, launcher: Launcher, cfg: HybridConfig
) -> HybridRun:
    from runtime.pipeline import PipelineConfig, run_pipeline

    p = plan.to_plan()
    try:
        run = run_pipeline(
            model, cluster, p, launcher, PipelineConfig(executor=cfg.executor, profiles=cfg.profiles)
        )
    except ValueError as e:
        return HybridRun("unsupported", str(e))
    m = run.measurements[0]
    if m.failure:
        return HybridRun("failed", m.failure)
    P = len(p.stages)
    busy: dict[str, float] = {}
    for rank, rec in run.records.items():
        dev = p.stages[rank % P].devices[rank // P]
        per_step = [
            sum(e - s for k, _, s, e in rec["events"] if k in ("F", "B") and t0 <= s < t1)
            for _, t0, t1 in rec["steps"][cfg.warmup :]
        ]
        busy[dev] = statistics.median(per_step) / cfg.dilation
    # run_pipeline's Measurement is already in the real cluster's seconds (divided by the dilation)
    return HybridRun(
        "ok",
        iteration_s=statistics.median(m.iteration_times),
        busy_s=busy,
        measurement=m,
        records=run.records,
    )
