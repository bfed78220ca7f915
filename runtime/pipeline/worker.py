"""One pipeline process: stage s of pipeline replica d, running the planner's kFkB action lists.

``python -m runtime.pipeline.worker --job DIR --rank R --master A --port P``. The driver
(``runtime.pipeline.run``) writes ``DIR/job.json``; the process writes ``DIR/rank<R>.json``
(events, step times, losses) and, in real mode, ``DIR/rank<R>.pt`` (every step's gradients and
the final parameters by variable name) and exits 0, or exits non-zero with the error on stderr.

A job holds one or more *phases*: plans with the same stages and global batch but their own
(schedule, k, b). The processes run warm-up + measured steps of each phase in turn, switching
(k, b) at a step boundary without restarting (a new PipelineStage and action lists; parameters
and process groups stay), as Ada-Grouper's coordinator does (§5.4).

Ranks: global rank = d·P + s. Every process creates every pipeline group (one per replica, the
stage's point-to-point traffic) and every data-parallel group (one per stage, its replicas'
gradient all-reduce) in the same order, as ``new_group`` requires.

Gradients (a decision for unequal batch shares): each micro-batch's loss is its mean; after the
last backward (the REDUCE_GRAD action) a stage multiplies its summed gradients by b / global_batch
and sums them over its replicas (one fused all-reduce per stage), which is exactly the gradient of
the mean loss over the global batch, whatever each replica's share. Then plain SGD with ``lr``.

The stage's runners, that gradient sync and the online tuner are
:class:`runtime.apply.pipeline.PipelineEngine`, the engine ``apply_plan`` runs on a user's module
(issue 40: one implementation); this module adds the processes, the probe, replay, SGD and records.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runtime.apply.pipeline import PipelineEngine
from runtime.executor.probe import PROBE_TAG, Stamps, timed_calls
from runtime.pipeline.stage_net import (
    DTYPES,
    Recompute,
    ReplayStageNet,
    StageNet,
    mse,
    output_width,
    synthetic_batch,
)
from runtime.pipeline.tuner import TunerConfig
from simulator.spec import ModelSpec, Plan


def run(job: dict[str, Any], rank: int, master: str, port: int, out: Path) -> None:
    model = ModelSpec.model_validate(job["model"])
    plans = [Plan.model_validate(p) for p in job["plans"]]
    cfg = job["config"]
    first = plans[0]
    P, D = len(first.stages), first.stages[0].replicate
    s, d = rank % P, rank // P
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{master}:{port}",
        rank=rank,
        world_size=P * D,
        timeout=timedelta(seconds=cfg["timeout_s"] + cfg["startup_timeout_s"]),
    )
    pp_groups = [dist.new_group([dd * P + ss for ss in range(P)]) for dd in range(D)]
    dp_groups = [dist.new_group([dd * P + ss for dd in range(D)]) for ss in range(P)]
    probe = run_pipeline_probe(rank, P, pp_groups[d], int(cfg["probe_repeats"]))
    stage = first.stages[s]
    dtype = DTYPES[cfg["dtype"]]
    real = cfg["compute"] == "real"
    module: torch.nn.Module
    if real:
        module = StageNet(model, stage.first_layer, stage.last_layer, cfg["seed"], dtype)
        width_in = output_width(model, stage.first_layer)
        width_out = output_width(model, stage.last_layer)
    else:
        rp = job["replay"]
        module = ReplayStageNet(
            rp["fwd_seconds"][0][s], rp["bwd_seconds"][0][s], rp["out_numel"][s], rp["param_numel"][s]
        )
        width_in = rp["out_numel"][s - 1] if s > 0 else 1
        width_out = rp["out_numel"][s]
    params = list(module.parameters())
    recompute = {int(i) for i in job.get("recompute") or ()}  # phases run with re-materialisation
    tuner_job = job.get("tuner")
    tcfg = TunerConfig(**tuner_job["config"]) if tuner_job is not None else None
    floors = {
        int(b): {(int(a), int(c)): float(t) for a, c, t in links}
        for b, links in ((tuner_job or {}).get("floors") or {}).items()
    }
    # The one pipeline engine apply_plan runs too (runtime/apply/pipeline.py): stages, kFkB
    # runners, the stage's DP all-reduce (scaled by b / global batch in real mode), the tuner.
    engine = PipelineEngine(
        module,
        s,
        d,
        plans,
        pp_groups[d],
        dp_groups[s],
        (width_in, width_out),
        start=tuner_job["start"] if tuner_job is not None else 0,
        tuner=tcfg,
        floors=floors,
        scale_grads=real,
        stage_module_for=lambda i: Recompute(module) if i in recompute else module,
    )
    all_grads: list[dict[str, torch.Tensor]] = []
    losses: list[float] = []

    def train_step(it: int) -> None:
        engine.tune()
        index = engine.current
        plan = plans[index]
        if isinstance(module, ReplayStageNet):  # this plan's micro-batch takes its own time
            module.fwd_seconds = job["replay"]["fwd_seconds"][index][s]
            module.bwd_seconds = job["replay"]["bwd_seconds"][index][s]
        t0 = time.monotonic()
        if real:
            x, y = synthetic_batch(model, it, cfg["seed"], plan.global_batch, dtype)
        else:
            x = torch.zeros(plan.global_batch, 1, dtype=dtype)
            y = torch.zeros(plan.global_batch, width_out, dtype=dtype)
        rows = engine.rows(plan.global_batch)
        loss = engine.step(x[rows], y[rows], mse, started=t0)
        with torch.no_grad():
            if isinstance(module, StageNet):
                named = zip(module.names, params, strict=True)
                all_grads.append({k: p.grad.detach().clone() for k, p in named if p.grad is not None})
            for p in params:
                if real and p.grad is not None:  # replay: no update, the gradient buffer stays
                    p.sub_(p.grad, alpha=cfg["lr"])
                    p.grad = None
        engine.mark_end()
        losses.append(float(loss) if loss is not None else 0.0)

    per_phase = cfg["warmup"] + cfg["iterations"]
    if tuner_job is None:
        for phase in range(len(plans)):
            engine.current = phase
            engine.runner(phase, mse, dtype, torch.device("cpu"))
            dist.barrier()
            for i in range(per_phase):
                train_step(phase * per_phase + i)
    else:
        for index in range(len(plans)):  # every candidate's stage and runtime exist before step 0
            engine.runner(index, mse, dtype, torch.device("cpu"))
        dist.barrier()
        for it in range(tuner_job["steps"]):
            train_step(it)
    tuner_log = engine.tuner.log if engine.tuner is not None else []
    log, step_times, schedules = engine.log, engine.step_times, engine.schedules
    if isinstance(module, StageNet):
        final = {k: p.detach().clone() for k, p in zip(module.names, params, strict=True)}
        torch.save({"grads": all_grads, "params": final}, out / f"rank{rank}.pt")
    record = {
        "rank": rank,
        "stage": s,
        "replica": d,
        "steps": step_times,
        "events": log.events,
        "losses": losses if s == P - 1 else [],
        "schedules": schedules,
        "tuner": tuner_log,
        "probe": probe,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


def run_pipeline_probe(rank: int, P: int, group: dist.ProcessGroup, repeats: int) -> dict[str, Stamps]:
    """The executor's per-call overhead probe on the pipeline's processes (``timed_calls``).

    ``collective``: a 1-element all-reduce over every process; ``p2p_round``: a 1-element
    message to and from each neighbour stage of the same replica (the pipeline's own calls),
    posted together and waited for.
    """
    one = torch.zeros(1)
    s = rank % P
    neighbours = [rank + 1] * (s + 1 < P) + [rank - 1] * (s > 0)

    def collective() -> bool:
        dist.all_reduce(one)
        return True

    def p2p_round() -> bool:
        works = []
        for peer in neighbours:
            works.append(dist.isend(torch.zeros(1), peer, group=group, tag=PROBE_TAG))
            works.append(dist.irecv(torch.empty(1), peer, group=group, tag=PROBE_TAG))
        for w in works:
            if w is not None:
                w.wait()
        return True

    return {"collective": timed_calls(repeats, collective), "p2p_round": timed_calls(repeats, p2p_round)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--job", required=True, type=Path)
    ap.add_argument("--rank", required=True, type=int)
    ap.add_argument("--master", required=True)
    ap.add_argument("--port", required=True, type=int)
    a = ap.parse_args(argv)
    job = json.loads((a.job / "job.json").read_text())
    run(job, a.rank, a.master, a.port, a.job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
