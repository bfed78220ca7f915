"""From the ranks' timestamps to a Measurement (barrier-free steady-state iteration times).

Iteration k *ends* when the last worker has finished synchronising it: ``end_k = max_r t2[r][k]``.
Its time is ``end_k - end_{k-1}``; the first iteration's reference is the latest start after
the start-of-trial barrier (``max_r t0[r][0]``). All timestamps come from CLOCK_MONOTONIC, one
clock for every process on a host (the testbed's namespaces share it). ``compute_times`` and
``sync_wait_times`` are the means over workers of (end of backward - start) and (end of
synchronisation - end of backward) of that iteration. ``environment["iterations_s"]`` is the
wall time of all iterations, warm-up included (a trial's overhead is ``trial_wall_s`` minus it).
"""

from __future__ import annotations

import statistics
from typing import Any

from runtime.executor.config import ExecutorConfig
from simulator.spec.measurement import Measurement


def aggregate(ranks: list[dict[str, Any]], cfg: ExecutorConfig, environment: dict[str, Any]) -> Measurement:
    workers = [r for r in ranks if r["role"] == "worker"]
    times = [r["times"] for r in workers]
    n = cfg.warmup + cfg.iterations
    if not times or any(len(t) != n for t in times):
        raise ValueError(f"expected {n} iterations from {len(workers)} workers")
    ends = [max(t[k][2] for t in times) for k in range(n)]
    start = max(t[0][0] for t in times)
    its, comp, wait = [], [], []
    for k in range(cfg.warmup, n):
        its.append(ends[k] - (ends[k - 1] if k > 0 else start))
        comp.append(statistics.fmean(t[k][1] - t[k][0] for t in times))
        wait.append(statistics.fmean(t[k][2] - t[k][1] for t in times))
    return Measurement(
        iteration_times=tuple(its),
        compute_times=tuple(comp),
        sync_wait_times=tuple(wait),
        warmup=cfg.warmup,
        scale=cfg.scale,
        compute_mode=cfg.compute,
        backend=cfg.backend,
        environment={**environment, "iterations_s": ends[-1] - start},
    )


def failed(reason: str, cfg: ExecutorConfig, environment: dict[str, Any]) -> Measurement:
    return Measurement(
        failure=reason,
        warmup=cfg.warmup,
        scale=cfg.scale,
        compute_mode=cfg.compute,
        backend=cfg.backend,
        environment=environment,
    )
