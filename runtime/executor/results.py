"""From the ranks' timestamps to a Measurement (one barrier before every iteration).

Every rank passes a barrier before every iteration (``worker.py``). Iteration k *starts* when the
last worker leaves that barrier, ``start_k = max_r t0[r][k]``, and *ends* when the last worker has
finished synchronising it, ``end_k = max_r t2[r][k]``; its time is ``end_k - start_k``. All
timestamps come from CLOCK_MONOTONIC, one clock for every process on a host (the testbed's
namespaces share it). ``compute_times`` and ``sync_wait_times`` are the means over workers of (end
of backward - start) and (end of synchronisation - end of backward) of that iteration.

Time dilation D: every time (iterations, compute, sync wait, the probe's per-call overhead) is
divided by ``cfg.dilation``, so a Measurement is in the real cluster's seconds.
``environment["iterations_s"]`` is the (undilated) wall time of all iterations, warm-up included
(a trial's overhead is ``trial_wall_s`` minus it); ``environment["per_call_overhead_s"]`` holds
the probe's medians (``probe.py``), already divided by D. Workers that measured their peak memory
(the user's model: ``user_model.py``) give ``peak_memory_bytes``, the largest over workers, and
``peak_memory``, what was measured (``cuda_max_memory_allocated`` or ``rss_high_water``).
"""

from __future__ import annotations

import statistics
from typing import Any

from runtime.executor.config import ExecutorConfig
from runtime.executor.probe import PROBE_KINDS, call_seconds
from simulator.spec.measurement import Measurement


def aggregate(ranks: list[dict[str, Any]], cfg: ExecutorConfig, environment: dict[str, Any]) -> Measurement:
    workers = [r for r in ranks if r["role"] == "worker"]
    times = [r["times"] for r in workers]
    n = cfg.warmup + cfg.iterations
    if not times or any(len(t) != n for t in times):
        raise ValueError(f"expected {n} iterations from {len(workers)} workers")
    d = cfg.dilation
    ends = [max(t[k][2] for t in times) for k in range(n)]
    starts = [max(t[k][0] for t in times) for k in range(n)]
    its, comp, wait = [], [], []
    for k in range(cfg.warmup, n):
        its.append((ends[k] - starts[k]) / d)
        comp.append(statistics.fmean(t[k][1] - t[k][0] for t in times) / d)
        wait.append(statistics.fmean(t[k][2] - t[k][1] for t in times) / d)
    overhead = {}
    for kind in PROBE_KINDS:
        calls = call_seconds([r["probe"][kind] for r in workers if kind in r.get("probe", {})])
        if calls:
            overhead[kind] = statistics.median(calls) / d
    peaks = [int(r["peak_memory_bytes"]) for r in workers if "peak_memory_bytes" in r]
    memory = (
        {"peak_memory_bytes": max(peaks), "peak_memory": str(workers[0].get("peak_memory", ""))}
        if peaks
        else {}
    )
    return Measurement(
        iteration_times=tuple(its),
        compute_times=tuple(comp),
        sync_wait_times=tuple(wait),
        warmup=cfg.warmup,
        scale=cfg.scale,
        compute_mode=cfg.compute,
        backend=cfg.backend,
        environment={
            **environment,
            "iterations_s": ends[-1] - starts[0],
            "dilation": d,
            "per_call_overhead_s": overhead,
            **memory,
        },
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
