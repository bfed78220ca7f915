"""Automatic partition into TaskGraphs from the hardware (Whale §3.1.2 ``auto_parallel``, §3.3).

Whale partitions the model into ``num_task_graph`` TaskGraphs "according to the computing resource
capacity and the model structure". Here the number is chosen too: for every P dividing the
device count (P ≤ ``max_stages`` and ≤ the layers), P = 1 is data parallelism over every device
with Algorithm 1's shares, P > 1 a P-stage pipeline nested D = N / P times, its stages on the
devices sorted by memory (earlier stages larger) and its layers cut to balance stage times by
device speed under each device's memory (``search.hybrid.placement``). Micro-batches per replica:
the divisor of the replica's batch closest to ``micro_batches_per_stage`` × P and at least P (so
1F1B fills the pipeline). Every candidate is checked by the one memory model
(``memory_reasons``) and timed by the hybrid cost model; the fastest that fits wins.

Decision: pipeline replicas get equal batches (the memory-sorted placement gives every nested
replica the same mix of device types whenever the counts allow, so Algorithm 1 across replicas
would return the even split); TaskGraphs inside a pipeline are replicate(1) (what the pipeline
executor runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from search.feasibility import MemoryModel
from search.hybrid.balance import InfeasibleBalance
from search.hybrid.memory import Capacity
from search.hybrid.placement import InfeasiblePartition
from search.hybrid.plans import all_devices, balanced_data_parallel, balanced_pipeline, memory_reasons
from simulator.analytical.params import CostParams
from simulator.hybrid import predict
from simulator.spec import ClusterSpec, HybridPlan, ModelSpec


@dataclass(frozen=True)
class AutoCandidate:
    """One number of TaskGraphs tried: its plan and predicted seconds, or why it was dropped."""

    num_task_graphs: int
    plan: HybridPlan | None
    seconds: float  # inf when dropped
    reason: str  # '' when it fits


@dataclass(frozen=True)
class AutoPlan:
    """The fastest plan that fits, and every candidate considered."""

    plan: HybridPlan
    seconds: float
    candidates: tuple[AutoCandidate, ...]


def micro_batches_for(replica_batch: int, stages: int, per_stage: int) -> int | None:
    """The divisor of ``replica_batch`` ≥ ``stages`` closest to ``per_stage`` × stages (None: none)."""
    target = per_stage * stages
    divisors = [m for m in range(stages, replica_batch + 1) if replica_batch % m == 0]
    return min(divisors, key=lambda m: (abs(m - target), m)) if divisors else None


def auto_partition(
    model: ModelSpec,
    cluster: ClusterSpec,
    memory: MemoryModel,
    global_batch: int,
    *,
    devices: Sequence[str] | None = None,
    max_stages: int = 8,
    micro_batches_per_stage: int = 2,
    capacity: Capacity = "compute",
    params: CostParams | None = None,
) -> AutoPlan:
    """Choose the number of TaskGraphs, their devices, layers and shares for ``cluster``.

    Raises ValueError naming ``global_batch`` when no candidate fits, with every candidate's reason.
    """
    devs = list(devices) if devices is not None else all_devices(cluster)
    n = len(devs)
    L = len(model.layers)
    out: list[AutoCandidate] = []
    for p in range(1, min(n, max_stages, L) + 1):
        if n % p:
            continue
        try:
            if p == 1:
                plan, _ = balanced_data_parallel(
                    model, cluster, memory, global_batch, devs, capacity=capacity, params=params
                )
            else:
                d = n // p
                if global_batch % d:
                    raise ValueError(f"global_batch {global_batch} does not split over {d} pipelines")
                m = micro_batches_for(global_batch // d, p, micro_batches_per_stage)
                if m is None:
                    raise ValueError(
                        f"a pipeline's batch {global_batch // d} has fewer samples than {p} stages"
                    )
                choice = balanced_pipeline(
                    model, cluster, memory, devs, p, global_batch, global_batch // d // m, 1, params
                )
                plan = choice.plan
        except (InfeasibleBalance, InfeasiblePartition, ValueError) as e:
            out.append(AutoCandidate(p, None, math.inf, str(e)))
            continue
        reasons = memory_reasons(plan, memory)
        if reasons:
            out.append(AutoCandidate(p, plan, math.inf, "; ".join(reasons)))
            continue
        out.append(AutoCandidate(p, plan, predict(model, cluster, plan, params).seconds, ""))
    fitting = [c for c in out if c.plan is not None and not c.reason]
    if not fitting:
        raise ValueError(
            f"global_batch: no partition of {model.name} over {n} devices fits: "
            + " | ".join(f"{c.num_task_graphs} TaskGraphs: {c.reason}" for c in out)
        )
    best = min(fitting, key=lambda c: (c.seconds, c.num_task_graphs))
    assert best.plan is not None
    return AutoPlan(best.plan, best.seconds, tuple(out))
