"""A gpu-pool trial of a search that names a model factory: the user's own module, as the agents run it.

A search may name ``model_factory`` (``module:function``, issue 41). On an agent pool every node's
torchrun runs ``runtime.agent.rank_main``, whose ranks train that module with the plan applied
(``runtime.executor.user_model.run_user_trial``). A ``gpu`` pool worker runs such a trial the same
way on its one node: one ``torchrun --nnodes 1`` (``runtime.agent.torchrun``, c10d rendezvous on a
free loopback port, run id ``trial<id>-<attempt>``) of ``G + 1`` processes (the node's GPUs and its
PS server, ``RankLayout``), the same job file, the same rank entry and the same aggregation
(``runtime.executor.results.aggregate``), so what is measured is the same code path on one node.

Why not the executor session the gpu pool keeps up for the ModelSpec's layers: its ranks run
``runtime.executor.worker.run_trial`` only; the user's module is built per trial by the rank
entry. Each factory trial therefore pays a fresh torchrun (``benchmarks/trial_launch.py`` measures
that start-up against the session's).

Before anything starts, the same checks as an agent's (``runtime.agent.node``): the strategy is
valid for the model and cluster and supported, and the factory imports on this host; a refusal is
the trial's failed measurement. The ranks check the module against the search's spec by variable.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from runtime.worker.plans import TrialContext
from simulator.spec import SpecError, Strategy
from simulator.spec.io import parse_as
from simulator.spec.measurement import MeasuredOn, Measurement


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(context: TrialContext, target: str, run_id: str, backend: str) -> dict[str, Any]:
    """What the Measurement says about where and how it ran (an agent's fields, pool 'gpu')."""
    import torch

    gpu_types = tuple(sorted({n.device for n in context.cluster.nodes}))
    return {
        "launcher": "torchrun",
        "torchrun_run_id": run_id,
        "pool": "gpu",
        "measured_on": MeasuredOn(
            site="cluster", pool="gpu", gpu_types=gpu_types, torchrun_run_id=run_id
        ).model_dump(mode="json"),
        "model_factory": target,
        "host": platform.node(),
        "torch": torch.__version__,
        "backend": backend,
    }


def run(document: dict[str, Any], context: TrialContext) -> Measurement:
    """Run one trial of the Strategy ``document`` on the factory's module (module docstring)."""
    from runtime.agent import torchrun
    from runtime.agent.node import factory_refusal
    from runtime.agent.rank_main import nproc
    from runtime.executor.layout import RankLayout
    from runtime.executor.plan import unsupported_reason
    from runtime.executor.results import aggregate, failed
    from runtime.worker.trial import executor_config

    target = str(context.options["model_factory"])
    trial, attempt = context.trial
    run_id = f"trial{trial}-{attempt}"
    # The user's module always runs for real (there is nothing to replay); the pool's backend stays.
    cfg = dataclasses.replace(executor_config(context.options, context.cluster), compute="real")
    env = environment(context, target, run_id, cfg.backend)
    if len(context.cluster.nodes) != 1:
        return failed(f"cluster {context.cluster.name}: the gpu pool runs single-node clusters", cfg, env)
    try:
        strategy = parse_as(Strategy, document)
        strategy.check(context.model, context.cluster)
        reason = unsupported_reason(strategy)
    except (SpecError, ValueError) as e:
        return failed(f"invalid strategy: {e}", cfg, env)
    reason = reason or factory_refusal(target, platform.node())
    if reason is not None:
        return failed(reason, cfg, env)
    work = Path(tempfile.mkdtemp(prefix="strategist-gpu-factory-"))
    try:
        job = {"model": context.model.model_dump(mode="json"), "cluster": context.cluster.model_dump(mode="json"),
               "config": json.loads(cfg.to_json()), "strategy": json.loads(strategy.model_dump_json()),
               "trial": trial, "result": str(work / "result.json"), "model_factory": target}  # fmt: skip
        (work / "job.json").write_text(json.dumps(job))
        node = torchrun.NodeLaunch(1, nproc(RankLayout(context.cluster), 0), 0, f"127.0.0.1:{_free_port()}",
                                   run_id, "127.0.0.1", work / "job.json", cfg.startup_timeout_s)  # fmt: skip
        t0 = time.monotonic()
        proc = torchrun.start(node, work / "torchrun.log")
        try:
            code = proc.wait(timeout=cfg.startup_timeout_s + cfg.timeout_s)
        except subprocess.TimeoutExpired:  # end it: the trial fails
            code = None
        code = torchrun.stop(proc) if code is None else code
        env["trial_wall_s"] = time.monotonic() - t0
        result = work / "result.json"
        if code != 0 or not result.exists():
            return failed(f"torchrun exited with {code}: {torchrun.tail(work / 'torchrun.log')}", cfg, env)
        payload = json.loads(result.read_text())
        env["torchrun_run_id"] = payload.get("run_id") or run_id
        return aggregate(payload["ranks"], cfg, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
