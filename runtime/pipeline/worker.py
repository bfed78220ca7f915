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

from runtime.executor.probe import PROBE_TAG, Stamps, timed_calls
from runtime.pipeline.adapter import EventLog, ScheduleRunner, make_stage
from runtime.pipeline.profile import profile_records
from runtime.pipeline.stage_net import (
    DTYPES,
    Recompute,
    ReplayStageNet,
    StageNet,
    mse,
    output_width,
    synthetic_batch,
)
from runtime.pipeline.tuner import AutoTuner, TunerConfig
from simulator.pipeline.schedule import kfkb
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
    grad_scale = [1.0]

    def reduce_grad() -> None:
        grads = [p.grad for p in params if p.grad is not None]
        if real:  # replayed gradients carry no values: only their all-reduce is timed
            for g in grads:
                g.mul_(grad_scale[0])
        if D > 1 and grads:
            flat = torch.cat([g.flatten() for g in grads])
            dist.all_reduce(flat, group=dp_groups[s])
            i = 0
            for g in grads:
                g.copy_(flat[i : i + g.numel()].view_as(g))
                i += g.numel()

    log = EventLog()
    all_grads: list[dict[str, torch.Tensor]] = []
    step_times: list[tuple[int, float, float]] = []
    losses: list[float] = []
    runners: dict[int, tuple[ScheduleRunner, int, int]] = {}
    schedules: dict[str, list[str]] = {}

    def runner_for(index: int) -> tuple[ScheduleRunner, int, int]:
        if index not in runners:
            plan = plans[index]
            if plan.stages != first.stages:
                raise ValueError(f"plans.{index}.stages: every plan must keep the stages of plans.0")
            b = plan.micro_batch_size
            n = plan.replica_micro_batches(d)
            offset = sum(plan.replica_micro_batches(dd) for dd in range(d)) * b
            ex_in = torch.zeros(b, width_in, dtype=dtype)
            ex_out = torch.zeros(b, width_out, dtype=dtype)
            stage_module = Recompute(module) if index in recompute else module
            pstage = make_stage(stage_module, s, P, ex_in, ex_out, pp_groups[d], log)
            schedule = kfkb(P, n, plan.group_size(n))
            runners[index] = (ScheduleRunner(pstage, schedule, mse, reduce_grad, log), n, offset)
            schedules[str(index)] = schedule.to_rows()[s]
        return runners[index]

    def train_step(index: int, it: int) -> None:
        plan = plans[index]
        runner, n, offset = runner_for(index)
        b = plan.micro_batch_size
        grad_scale[0] = b / plan.global_batch
        if isinstance(module, ReplayStageNet):  # this plan's micro-batch takes its own time
            module.fwd_seconds = job["replay"]["fwd_seconds"][index][s]
            module.bwd_seconds = job["replay"]["bwd_seconds"][index][s]
        t0 = time.monotonic()
        if real:
            x, y = synthetic_batch(model, it, cfg["seed"], plan.global_batch, dtype)
        else:
            x = torch.zeros(plan.global_batch, 1, dtype=dtype)
            y = torch.zeros(plan.global_batch, width_out, dtype=dtype)
        x, y = x[offset : offset + n * b], y[offset : offset + n * b]
        step_losses: list[Any] = []
        runner.step(x if s == 0 else None, y if s == P - 1 else None, step_losses)
        with torch.no_grad():
            if isinstance(module, StageNet):
                named = zip(module.names, params, strict=True)
                all_grads.append({k: p.grad.detach().clone() for k, p in named if p.grad is not None})
            for p in params:
                if real and p.grad is not None:  # replay: no update, the gradient buffer stays
                    p.sub_(p.grad, alpha=cfg["lr"])
                    p.grad = None
        step_times.append((index, t0, time.monotonic()))
        losses.append(sum(float(v) for v in step_losses) / max(1, len(step_losses)))

    per_phase = cfg["warmup"] + cfg["iterations"]
    tuner_log: list[dict[str, Any]] = []
    if job.get("tuner") is None:
        for phase in range(len(plans)):
            runner_for(phase)
            dist.barrier()
            for i in range(per_phase):
                train_step(phase, phase * per_phase + i)
    else:
        tcfg = TunerConfig(**job["tuner"]["config"])
        floors = {
            int(b): {(int(a), int(c)): float(t) for a, c, t in links}
            for b, links in (job["tuner"].get("floors") or {}).items()
        }
        tuner = AutoTuner(plans, job["tuner"]["start"], tcfg, floors=floors)
        for index in range(len(plans)):  # every candidate's stage and runtime exist before step 0
            runner_for(index)
        seen = seen_steps = 0
        ran: set[int] = set()
        first_steps: set[int] = set()  # a plan's first step (torch's one-off set-up): not observed
        dist.barrier()
        for it in range(job["tuner"]["steps"]):
            if it and it % tcfg.interval == 0:
                window = range(seen_steps, len(step_times))
                durations = [step_times[i][2] - step_times[i][1] for i in window if i not in first_steps]
                after = max((step_times[i][2] for i in window if i in first_steps), default=0.0)
                events = [e for e in log.events[seen:] if e[2] >= after]
                mine = {"replica": d, "stage": s, "events": events, "durations": durations}
                seen, seen_steps = len(log.events), len(step_times)
                gathered: list[Any] = [None] * (P * D)
                dist.all_gather_object(gathered, mine)
                slowest = [max(g["durations"][i] for g in gathered) for i in range(len(durations))]
                tuner.observe(profile_records(dict(enumerate(gathered))), slowest)
                tuner.decide(it)
            if tuner.current not in ran:
                ran.add(tuner.current)
                first_steps.add(len(step_times))
            train_step(tuner.current, it)
        tuner_log = tuner.log
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
