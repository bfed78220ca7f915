"""The user's own model in a trial (issue 41): real forward and backward of their ``nn.Module``.

A search may name a model factory, ``module:function`` (``searches.model_factory``). The function
takes no argument and returns ``(module, batch)`` or ``(module, batch, loss)``:

- ``module``: the ``nn.Module`` to train; its ``named_parameters()`` are the ModelSpec's variables
  (the spec is extracted from the same factory: ``strategist import-model module:function``);
- ``batch(n, step)``: ``(inputs, targets)`` for ``n`` samples of training step ``step``, the same
  on every call with the same arguments (seed it from ``step``): every worker builds the step's
  global batch and trains on its own rows, as the executor's reference model does;
- ``loss(output, targets)`` (optional): a scalar mean over the samples; default cross-entropy for
  integer targets (the output's last dimension is the classes), mean squared error otherwise.

A trial of such a search runs :func:`run_user_trial` instead of the executor's layer replicas
(``worker.run_trial``): every worker seeds torch with the trial's seed and builds the module
(identical initial parameters on every rank, as ``apply_plan`` requires too), hooks the plan's
synchronisation on its parameters and trains ``warmup + iterations`` steps with SGD at the trial's
``lr``, timed exactly as ``worker._worker`` times its iterations (one barrier before each; start,
end of backward, end of synchronisation), after the per-call overhead probe. It also records the
peak memory of the iterations: ``torch.cuda.max_memory_allocated`` on a CUDA device (reset before
the first iteration), else the process's high-water RSS (``resource.getrusage``'s ``ru_maxrss``,
which includes the interpreter and torch themselves).

Why not ``runtime.apply.apply_plan``: apply refuses plans with PS shards, since a user's torchrun
job has one process per GPU and no server processes. A trial has them (``RankLayout``: one PS
server per node, started by the agent's torchrun as local rank G), so this module builds the same
:class:`runtime.apply.sync.GradientSync` apply builds, over the trial's own process groups
(``Context.groups``, servers included), with :class:`RealShards` applying SGD in the shards (a PS
shard's update comes back from its server) as the trials of layer replicas do. The checks apply
makes that matter here are made here too (:func:`spec_params`: every variable by name and shape).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from runtime.apply.sync import GradientSync
from runtime.executor.plan import SyncPlan, build_plan
from runtime.executor.probe import run_probe
from runtime.executor.shards import RealShards
from runtime.executor.worker import Context, serve, served_shards
from simulator.spec import ModelSpec, Strategy

Batch = Callable[[int, int], tuple[Any, torch.Tensor]]
Loss = Callable[[Any, torch.Tensor], torch.Tensor]


class FactoryError(ValueError):
    """The model factory cannot be used here (not importable, wrong shape, not the search's model)."""


@dataclass
class UserModel:
    module: nn.Module
    batch: Batch
    loss: Loss


def default_loss(output: Any, targets: torch.Tensor) -> torch.Tensor:
    if not targets.is_floating_point():
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))
    return F.mse_loss(output, targets)


def load_user_model(target: str) -> UserModel:
    """Import ``target`` and call it; FactoryError says what is wrong (the trial's failure reason)."""
    from simulator.extract import load_factory

    try:
        factory = load_factory(target)
    except ValueError as e:
        raise FactoryError(f"model factory {target}: {e}") from None
    got = factory()
    parts = tuple(got) if isinstance(got, tuple | list) else (got,)
    if len(parts) not in (2, 3) or not isinstance(parts[0], nn.Module) or not callable(parts[1]):
        raise FactoryError(
            f"model factory {target}: must return (nn.Module, batch(n, step)[, loss]), got {type(got).__name__}"
        )
    loss = parts[2] if len(parts) == 3 else default_loss
    return UserModel(parts[0], parts[1], loss)


def spec_params(module: nn.Module, model: ModelSpec) -> list[nn.Parameter]:
    """The module's parameters in the spec's variable order; FactoryError names the first difference
    (the factory is not the model the search's spec was extracted from)."""
    params = dict(module.named_parameters())
    for v in model.variables:
        if v.name not in params:
            raise FactoryError(
                f"variable {v.name!r}: in the search's model spec but not in the factory's module"
            )
        if tuple(params[v.name].shape) != tuple(v.shape):
            raise FactoryError(
                f"variable {v.name!r}: the spec has shape {tuple(v.shape)}, the module {tuple(params[v.name].shape)}"
            )
    extra = sorted(set(params) - {v.name for v in model.variables})
    if extra:
        raise FactoryError(
            f"variable {extra[0]!r}: in the factory's module but not in the search's model spec"
        )
    return [params[v.name] for v in model.variables]


def build(
    target: str, model: ModelSpec, seed: int, device: torch.device
) -> tuple[UserModel, list[nn.Parameter]]:
    """The user's model with ``seed``'s initial parameters (every rank the same), on ``device``."""
    torch.manual_seed(seed)
    user = load_user_model(target)
    user.module.to(device)
    return user, spec_params(user.module, model)


def _rows(x: Any, lo: int, hi: int, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x[lo:hi].to(device)
    if isinstance(x, tuple | list):
        return type(x)(_rows(t, lo, hi, device) for t in x)
    if isinstance(x, dict):
        return {k: _rows(t, lo, hi, device) for k, t in x.items()}
    raise FactoryError(f"batch(): inputs must be tensors (or tuples/dicts of them), got {type(x).__name__}")


def _call(module: nn.Module, x: Any) -> Any:
    if isinstance(x, dict):
        return module(**x)
    if isinstance(x, tuple | list):
        return module(*x)
    return module(x)


def peak_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, what was measured) of this process so far."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda_max_memory_allocated"
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "rss_high_water"


def run_user_trial(ctx: Context, trial: int, strategy: Strategy, target: str) -> dict[str, Any]:
    """One trial of ``strategy`` on the user's model (this rank's part; see the module docstring)."""
    plan = build_plan(ctx.model, ctx.cluster, strategy)
    if ctx.layout.is_worker(ctx.rank):
        return _worker(ctx, trial, plan, target)
    return _server(ctx, plan, target)


def _server(ctx: Context, plan: SyncPlan, target: str) -> dict[str, Any]:
    mine = served_shards(ctx, plan)
    initial: dict[int, torch.Tensor] = {}
    if mine:  # the shard's starting value: the same seeded module every worker builds
        _, params = build(target, ctx.model, ctx.config.seed, torch.device("cpu"))
        for s in mine:
            info = plan.shards[s]
            view = (
                params[info.var_index].detach().narrow(info.axis, info.offset, info.shape[info.axis]).clone()
            )
            initial[s] = view.view(info.rows, -1) if info.sparse else view
    return serve(ctx, plan, initial)


def _worker(ctx: Context, trial: int, plan: SyncPlan, target: str) -> dict[str, Any]:
    cfg = ctx.config
    dev = ctx.groups.device
    user, params = build(target, ctx.model, cfg.seed, dev)
    sync = GradientSync(plan, RealShards(plan, params), ctx.groups, lr=cfg.lr, seed=cfg.seed)
    sync.hook(params, auto_finish=False)
    workers, b = ctx.layout.num_workers, ctx.batch
    lo, hi = ctx.rank * b, (ctx.rank + 1) * b  # workers are ranks 0..W-1 (RankLayout)
    times: list[tuple[float, float, float]] = []
    losses: list[float] = []
    probe = run_probe(ctx.groups, cfg.probe_repeats)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    dist.barrier()
    try:
        for it in range(cfg.warmup + cfg.iterations):
            x, y = user.batch(b * workers, it)
            x, y = _rows(x, lo, hi, dev), y[lo:hi].to(dev)
            dist.barrier()
            t0 = time.monotonic()
            sync.begin()
            loss = user.loss(_call(user.module, x), y)
            losses.append(float(loss))
            loss.backward()
            t1 = time.monotonic()
            sync.finish()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            times.append((t0, t1, time.monotonic()))
    finally:
        sync.close()
    peak, kind = peak_memory(dev)
    if cfg.param_dump_dir:
        dump = {v.name: p.detach().cpu().clone() for v, p in zip(ctx.model.variables, params, strict=True)}
        path = Path(cfg.param_dump_dir) / f"trial{trial}_rank{ctx.rank}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save(dump, tmp)
        os.replace(tmp, path)
    return {"rank": ctx.rank, "role": "worker", "times": times, "losses": losses, "probe": probe,
            "peak_memory_bytes": peak, "peak_memory": kind, "model_factory": target}  # fmt: skip


def reference_sgd(target: str, model: ModelSpec, workers: int, steps: int, lr: float, seed: int,
                  batch: int) -> dict[str, torch.Tensor]:  # fmt: skip
    """Single-process SGD of the factory's model on the same global batches (what every plan must reach)."""
    user, params = build(target, model, seed, torch.device("cpu"))
    for it in range(steps):
        x, y = user.batch(batch * workers, it)
        grads = torch.autograd.grad(user.loss(_call(user.module, x), y), params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(g.to_dense() if g.is_sparse else g, alpha=lr)
    return {v.name: p.detach() for v, p in zip(model.variables, params, strict=True)}


def factory_spec(target: str, batch_size: int, name: str | None = None) -> ModelSpec:
    """The ModelSpec of ``target`` exactly as ``strategist import-model module:function --batch-size N``
    extracts it (on the meta device, the inputs of ``batch(N, 0)``)."""
    from simulator.extract import import_model

    return import_model(target, name=name, batch_size=batch_size)
