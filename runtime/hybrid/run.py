"""Run a HybridPlan: one process per GPU on the launcher's nodes, measured; OOM is a result.

``run_hybrid(model, cluster, plan, launcher, config)`` starts ``runtime.hybrid.worker`` for every
GPU of the plan on its node (``LocalLauncher``: loopback; the testbed's ``Testbed``: the node's
namespace, links shaped), waits, and returns a ``HybridRun``:

- ``status``: ``ok``; ``oom`` (an emulated device's memory ledger overflowed: ``reason`` names the
  device, its type, what was being allocated and what it held); ``failed`` (a crash, with the
  first failing rank's last stderr line); ``timeout``; ``unsupported`` / ``invalid`` (refused
  before any process started, ``reason`` names the field).
- ``iteration_s``: median measured step time; step k lasts from the last device's start (all
  pass a barrier first) to the last device's end of its update, divided by the dilation.
- ``busy_s[device]``: median over measured steps of the device's compute seconds (replay: its
  replayed forward/backward; real: its layers' wall time), divided by the dilation.
- ``measurement``: the same as a ``Measurement`` (times per step; compute = mean busy).

Micro-batched plans (``num_micro_batches > 1``) are pipelines: they are the pipeline issue's
``Plan`` (``HybridPlan.to_plan``) and run with ``runtime.pipeline.run_pipeline``; this runner
refuses them as ``unsupported`` rather than keep a second pipeline executor.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from runtime.hybrid.config import HybridConfig
from runtime.hybrid.layout import Layout
from runtime.hybrid.net import unsupported_reason
from runtime.hybrid.worker import OOM_EXIT
from runtime.launch import Gang, GangResult, Launcher, free_port
from simulator.spec import ClusterSpec, HybridPlan, ModelSpec, hybrid_issues
from simulator.spec.measurement import Measurement

Status = Literal["ok", "oom", "failed", "timeout", "unsupported", "invalid"]


@dataclass(frozen=True)
class HybridRun:
    """What one hybrid run measured (see the module docstring)."""

    status: Status
    reason: str = ""
    iteration_s: float | None = None
    busy_s: dict[str, float] = field(default_factory=dict)
    peak_memory_bytes: dict[str, float] = field(default_factory=dict)
    measurement: Measurement | None = None
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    # real mode with record_grads: per rank, per step, gradient (after the DP all-reduce) by variable
    grads: dict[int, list[dict[str, torch.Tensor]]] = field(default_factory=dict)
    params: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    # real mode: per rank and variable, the shard it holds as (axis, lo, hi), None for the whole
    slices: dict[int, dict[str, tuple[int, int, int] | None]] = field(default_factory=dict)


def run_hybrid(
    model: ModelSpec, cluster: ClusterSpec, plan: HybridPlan, launcher: Launcher, config: HybridConfig
) -> HybridRun:
    """Run ``plan`` for ``config.warmup + config.iterations`` steps on ``launcher``'s nodes."""
    issues = hybrid_issues(plan, model, cluster)
    if issues:
        return HybridRun("invalid", f"invalid plan: {issues[0]}")
    if plan.num_micro_batches > 1:
        return HybridRun(
            "unsupported",
            "num_micro_batches: a pipelined plan runs with runtime.pipeline.run_pipeline(plan.to_plan(), ...)",
        )
    layout = Layout(model, cluster, plan, config.attention_heads)
    if config.compute == "real":
        reason = unsupported_reason(model, layout)
        if reason:
            return HybridRun("unsupported", f"real compute: {reason}")
    if config.backend == "nccl" and not torch.cuda.is_available():
        return HybridRun("unsupported", "backend: nccl needs CUDA, which this host does not have")
    job = {
        "model": model.model_dump(mode="json"),
        "cluster": cluster.model_dump(mode="json"),
        "plan": plan.model_dump(mode="json"),
        "config": config.to_dict(),
    }
    nodes = [layout.node_of(r) for r in range(layout.world)]
    with tempfile.TemporaryDirectory(prefix="strategist-hybrid-") as tmp:
        out = Path(tmp)
        (out / "job.json").write_text(json.dumps(job))
        master, port = launcher.address(nodes[0]), free_port()

        def argv(rank: int) -> list[str]:
            return [sys.executable, "-m", "runtime.hybrid.worker", "--job", str(out), "--rank", str(rank),
                    "--master", master, "--port", str(port)]  # fmt: skip

        with Gang(launcher, nodes, argv, port=port) as gang:
            status, reason = _status(gang.wait(time.monotonic() + config.deadline_s))
        if status == "oom":
            rec = next(
                (json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))
                 if json.loads(p.read_text()).get("status") == "oom"),
                {"reason": reason},
            )  # fmt: skip
            return HybridRun("oom", rec["reason"])
        if status != "ok":
            return HybridRun(status, reason)
        records = {r: json.loads((out / f"rank{r}.json").read_text()) for r in range(layout.world)}
        run = HybridRun("ok", records=records)
        if config.compute == "real":
            blobs = {r: torch.load(out / f"rank{r}.pt") for r in range(layout.world)}
            run = HybridRun(
                "ok",
                records=records,
                grads={r: b["grads"] for r, b in blobs.items()},
                params={r: b["params"] for r, b in blobs.items()},
                slices={r: b["slices"] for r, b in blobs.items()},
            )
    return _measure(run, config, launcher)


def _status(ended: GangResult) -> tuple[Status, str]:
    """The run's status: any rank that exited with ``OOM_EXIT`` makes it 'oom'."""
    oom = [e.rank for e in ended.exits if e.returncode == OOM_EXIT]
    if ended.status == "failed" and oom:
        return "oom", f"rank {oom[0]} ran out of memory"
    if ended.status == "timeout":
        return "timeout", "timeout: the hybrid run took longer than timeout_s + startup_timeout_s"
    return ended.status, ended.reason


def _measure(run: HybridRun, cfg: HybridConfig, launcher: Launcher) -> HybridRun:
    recs = run.records
    d = cfg.dilation
    n = cfg.warmup + cfg.iterations
    starts = [max(rec["steps"][k][0] for rec in recs.values()) for k in range(n)]
    ends = [max(rec["steps"][k][2] for rec in recs.values()) for k in range(n)]
    its = [(ends[k] - starts[k]) / d for k in range(cfg.warmup, n)]
    busy = {
        rec["device"]: statistics.median(rec["steps"][k][3] / d for k in range(cfg.warmup, n))
        for rec in recs.values()
    }
    compute = [
        statistics.fmean(rec["steps"][k][3] for rec in recs.values()) / d for k in range(cfg.warmup, n)
    ]
    env: dict[str, Any] = {"torch": torch.__version__, "launcher": type(launcher).__name__, "dilation": d}
    extra = getattr(launcher, "environment", None)
    if isinstance(extra, dict):
        env["launcher_environment"] = extra
    m = Measurement(
        iteration_times=tuple(its),
        compute_times=tuple(compute),
        sync_wait_times=tuple(max(0.0, t - c) for t, c in zip(its, compute, strict=True)),
        warmup=cfg.warmup,
        scale=cfg.scale,
        compute_mode=cfg.compute,
        backend=cfg.backend,
        environment=env,
    )
    return HybridRun(
        "ok",
        iteration_s=statistics.median(its),
        busy_s=busy,
        peak_memory_bytes={rec["device"]: rec["peak_memory_bytes"] for rec in recs.values()},
        measurement=m,
        records=recs,
        grads=run.grads,
        params=run.params,
        slices=run.slices,
    )
