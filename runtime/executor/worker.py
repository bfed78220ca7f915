"""One trial inside one process: a worker's training iterations, or a server's serving steps.

Replay compute (issue 5, part 2; issue 15): layer l's forward and backward take the seconds
``simulator.analytical.compute.layer_times`` gives (per-layer roofline, the same function as the
cost model's T_comp, corrected by ``ExecutorConfig.efficiency``), spent sleeping until a deadline
measured from the start of the pass (so wake-up jitter does not accumulate). Backward walks the
layers in reverse and marks a layer's variables ready when its backward time is over.

With time dilation D (``ExecutorConfig.dilation``) every replayed layer takes D times longer; the
driver divides every measured time by D.

Measurement protocol: every rank (workers and servers) meets at a barrier before every iteration,
warm-up included, so an iteration starts with every process ready and no skew from the previous
one; before the iterations every rank runs the per-call overhead probe (``probe.py``).
Timestamps are ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for every process on a host);
each worker records per iteration (start, end of backward, end of synchronisation).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from runtime.apply.sync import GradientSync
from runtime.executor.config import ExecutorConfig
from runtime.executor.groups import CommGroups
from runtime.executor.layout import RankLayout
from runtime.executor.model import SpecNet, local_slice
from runtime.executor.plan import PSUnit, SyncPlan, build_plan
from runtime.executor.probe import run_probe
from runtime.executor.ps import Server
from runtime.executor.shards import RealShards, ReplayShards, ShardTensors, server_initial_param
from simulator.analytical import compute
from simulator.analytical.params import CostParams
from simulator.spec import ClusterSpec, DeviceType, ModelSpec, Strategy
from simulator.spec.profile import Profile


@dataclass
class Context:
    """What a process knows for the whole session."""

    model: ModelSpec
    cluster: ClusterSpec
    config: ExecutorConfig
    layout: RankLayout
    rank: int
    groups: CommGroups
    # Measured profiles the replay uses for their (model, device, dtype, batch) key (issue 15).
    profiles: tuple[Profile, ...] = ()

    @property
    def batch(self) -> int:
        return self.config.batch_size or self.model.batch_size


def layer_seconds(
    model: ModelSpec,
    device: DeviceType,
    batch: int,
    efficiency: float,
    profiles: tuple[Profile, ...] = (),
) -> list[tuple[float, float]]:
    """(forward, backward) seconds of every layer on ``device`` for ``batch`` samples.

    The cost model's compute function (``compute.layer_times``) with ``efficiency`` as the
    device correction and ``profiles`` as its measured profiles: a profile for (model, device,
    dtype, batch) gives the layers it lists, the roofline the rest, exactly as the cost model's
    T_comp with the same profiles, so replayed and predicted compute agree by construction.
    """
    params = CostParams(efficiency=efficiency).with_profiles(profiles)
    t = compute.layer_times(model, device, batch, params)
    return list(zip(t.fwd.tolist(), t.bwd.tolist(), strict=True))


def _sleep_until(deadline: float) -> None:
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def run_trial(ctx: Context, trial: int, strategy: Strategy) -> dict[str, Any]:
    plan = build_plan(ctx.model, ctx.cluster, strategy)
    if ctx.layout.is_worker(ctx.rank):
        return _worker(ctx, trial, plan)
    return _server(ctx, plan)


def _server(ctx: Context, plan: SyncPlan) -> dict[str, Any]:
    mine = served_shards(ctx, plan)
    net = (
        SpecNet(ctx.model, ctx.config.seed, torch.device("cpu"))
        if ctx.config.compute == "real" and mine
        else None
    )
    return serve(ctx, plan, {s: server_initial_param(plan, s, net, ctx.config.scale) for s in mine})


def served_shards(ctx: Context, plan: SyncPlan) -> list[int]:
    """The shards this server rank's node holds."""
    node = ctx.layout.node_of(ctx.rank)
    return [u.shard for u in plan.units if isinstance(u, PSUnit) and u.server == node]


def serve(ctx: Context, plan: SyncPlan, params: dict[int, torch.Tensor]) -> dict[str, Any]:
    """Run this rank's parameter server, holding ``params`` (its shards' starting values), in step
    with the workers: the bandwidth probe, then warm-up and measured iterations."""
    server = Server(plan, ctx.layout.node_of(ctx.rank), ctx.groups, params, ctx.config.lr)
    run_probe(ctx.groups, ctx.config.probe_repeats)
    dist.barrier()
    for _ in range(ctx.config.warmup + ctx.config.iterations):
        dist.barrier()
        server.iteration()
    return {"rank": ctx.rank, "role": "server", "shards": len(params)}


def _worker(ctx: Context, trial: int, plan: SyncPlan) -> dict[str, Any]:
    cfg = ctx.config
    dev = ctx.groups.device
    net: SpecNet | None = None
    tensors: ShardTensors
    if cfg.compute == "real":
        net = SpecNet(ctx.model, cfg.seed, dev, teacher_seed=cfg.teacher_seed)
        tensors = RealShards(plan, net)
    else:
        tensors = ReplayShards(plan, cfg.scale, cfg.seed, ctx.rank, dev)
    # The same synchronisation a user's module gets from runtime.apply.apply_plan (one implementation).
    sync = GradientSync(plan, tensors, ctx.groups, lr=cfg.lr, seed=cfg.seed)
    if net is not None:
        sync.hook(net.params, auto_finish=False)
    node = ctx.layout.node_of(ctx.rank)
    fwd = layer_seconds(ctx.model, ctx.cluster.device_type(node), ctx.batch, cfg.efficiency, ctx.profiles)
    fwd = [(f * cfg.dilation, b * cfg.dilation) for f, b in fwd]  # time dilation D
    times: list[tuple[float, float, float]] = []
    losses: list[float] = []
    probe = run_probe(ctx.groups, cfg.probe_repeats)
    dist.barrier()
    try:
        for it in range(cfg.warmup + cfg.iterations):
            dist.barrier()
            t0 = time.monotonic()
            if cfg.crash_rank == ctx.rank:
                raise RuntimeError(f"injected crash on rank {ctx.rank} (ExecutorConfig.crash_rank)")
            sync.begin()
            if net is not None:
                glob = net.global_batch(it, cfg.seed, ctx.batch * ctx.layout.num_workers, dev)
                loss = net.loss(local_slice(glob, ctx.rank, ctx.batch))
                losses.append(float(loss))
                loss.backward()
            else:
                _replay(ctx, sync, fwd, t0)
            t1 = time.monotonic()
            sync.finish()
            times.append((t0, t1, time.monotonic()))
    finally:
        sync.close()
    if cfg.param_dump_dir:
        # Real: every variable by name; replay: every shard's synthetic parameter as "shard<id>".
        dump = (
            {v.name: p.detach().cpu() for v, p in zip(ctx.model.variables, net.params, strict=True)}
            if net is not None
            else {f"shard{i.id}": tensors.param(i.id).detach().cpu().clone() for i in plan.shards}
        )
        path = Path(cfg.param_dump_dir) / f"trial{trial}_rank{ctx.rank}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save(dump, tmp)
        os.replace(tmp, path)
    return {"rank": ctx.rank, "role": "worker", "times": times, "losses": losses, "probe": probe}


def _replay(ctx: Context, sync: GradientSync, times: list[tuple[float, float]], t0: float) -> None:
    deadline = t0 + sum(fwd for fwd, _ in times)
    _sleep_until(deadline)
    index = ctx.model.variable_index
    for layer, (_, bwd) in zip(reversed(ctx.model.layers), reversed(times), strict=True):
        deadline += bwd
        _sleep_until(deadline)
        for var in layer.variables:
            sync.variable_ready(index[var.name])
