"""Hardware-aware HybridPlans: Algorithm 1's data-parallel shares, balanced pipelines, and their baselines.

``data_parallel`` and ``pipeline`` write a ``simulator.spec.HybridPlan`` from shares or a layer
cut; ``balanced_data_parallel`` / ``even_data_parallel`` and ``balanced_pipeline`` /
``even_pipeline`` are the hardware-aware plans and the homogeneous baselines the benchmark and
the automatic partition compare. Every plan is checked against the one memory model
(``memory_reasons``: ``MemoryModel.stage_bytes`` per device and TaskGraph under the plan's
shares, stash and buffers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from search.feasibility import MemoryModel
from search.hybrid.balance import Balance, even_shares, memory_constrained_balance
from search.hybrid.memory import Capacity, device_slots, node_of, replicate_profile, split_profile
from search.hybrid.placement import (
    Order,
    Partition,
    balanced_partition,
    even_partition,
    schedule_samples,
    stage_slots,
)
from simulator.analytical.params import CostParams
from simulator.spec import ClusterSpec, HybridPlan, ModelSpec, TaskGraph, VirtualDevice
from simulator.spec.hybrid import device_name


def all_devices(cluster: ClusterSpec) -> list[str]:
    """Every GPU of ``cluster`` as 'node:gpu', in rank order."""
    return [device_name(cluster, r) for r in range(len(cluster.devices))]


def data_parallel(
    model: ModelSpec, cluster: ClusterSpec, devices: Sequence[str], shares: Sequence[int], name: str = ""
) -> HybridPlan:
    """The whole model as one replicate TaskGraph over ``devices`` with per-device ``shares``."""
    tg = TaskGraph(
        first_layer=0,
        last_layer=len(model.layers),
        primitive="replicate",
        degree=len(devices),
        virtual_devices=(VirtualDevice.on(cluster, devices),),
        batch_shares=dict(zip(devices, shares, strict=True)),
    )
    return HybridPlan(
        name=name, model=model.name, cluster=cluster.name, task_graphs=(tg,), global_batch=sum(shares)
    )


def balanced_data_parallel(
    model: ModelSpec,
    cluster: ClusterSpec,
    memory: MemoryModel,
    global_batch: int,
    devices: Sequence[str] | None = None,
    *,
    capacity: Capacity = "compute",
    params: CostParams | None = None,
) -> tuple[HybridPlan, Balance]:
    """Algorithm 1's shares of ``global_batch`` over ``devices`` (default: every GPU)."""
    devs = list(devices) if devices is not None else all_devices(cluster)
    L = len(model.layers)
    slots = device_slots(
        model,
        cluster,
        devs,
        memory,
        batch=max(1, global_batch // len(devs)),
        capacity=capacity,
        params=params,
    )
    bal = memory_constrained_balance(replicate_profile(memory, 0, L, global_batch), slots)
    return data_parallel(model, cluster, devs, bal.shares, "hardware-aware DP (Algorithm 1)"), bal


def even_data_parallel(
    model: ModelSpec, cluster: ClusterSpec, global_batch: int, devices: Sequence[str] | None = None
) -> HybridPlan:
    """The homogeneous default: ``global_batch`` split evenly."""
    devs = list(devices) if devices is not None else all_devices(cluster)
    return data_parallel(model, cluster, devs, even_shares(global_batch, len(devs)), "even DP")


def pipeline(
    model: ModelSpec,
    cluster: ClusterSpec,
    stage_devices: Sequence[Sequence[str]],
    ranges: Sequence[tuple[int, int]],
    global_batch: int,
    micro_batch: int,
    *,
    schedule: str = "1f1b",
    k: int = 1,
    name: str = "",
) -> HybridPlan:
    """One degree-1 replicate TaskGraph per stage; stage s's nested replica r runs on ``stage_devices[s][r]``."""
    nested = len(stage_devices[0])
    tgs = tuple(
        TaskGraph(
            first_layer=a,
            last_layer=b,
            primitive="replicate",
            degree=1,
            virtual_devices=tuple(VirtualDevice.on(cluster, [d]) for d in devs),
        )
        for (a, b), devs in zip(ranges, stage_devices, strict=True)
    )
    if global_batch % micro_batch:
        raise ValueError(f"micro_batch: {micro_batch} does not divide global_batch {global_batch}")
    return HybridPlan.model_validate(
        {
            "name": name,
            "model": model.name,
            "cluster": cluster.name,
            "task_graphs": tgs,
            "nested_dp": nested,
            "global_batch": global_batch,
            "num_micro_batches": global_batch // micro_batch,
            "schedule": schedule,
            "k": k,
        }
    )


@dataclass(frozen=True)
class PipelineChoice:
    """A pipeline plan with the layer cut and stage slots it came from."""

    plan: HybridPlan
    partition: Partition
    order: Order


def _pipeline(
    model: ModelSpec,
    cluster: ClusterSpec,
    memory: MemoryModel,
    devices: Sequence[str],
    num_stages: int,
    global_batch: int,
    micro_batch: int,
    k: int,
    params: CostParams | None,
    *,
    balanced: bool,
) -> PipelineChoice:
    order: Order = "memory" if balanced else "sequential"
    slots = stage_slots(cluster, memory, devices, num_stages, order, params, micro_batch)
    nested = len(slots[0].devices)
    if global_batch % (nested * micro_batch):
        raise ValueError(
            f"global_batch: {global_batch} is not a multiple of nested replicas x micro_batch = {nested * micro_batch}"
        )
    n = global_batch // (nested * micro_batch)
    cut = balanced_partition if balanced else even_partition
    part = cut(model, memory, slots, micro_batch, n, k, params)
    schedule = "1f1b" if k == 1 else "gpipe" if k >= n else "kfkb"
    plan = pipeline(
        model,
        cluster,
        [s.devices for s in slots],
        part.ranges,
        global_batch,
        micro_batch,
        schedule=schedule,
        k=k if schedule == "kfkb" else 1,
        name=f"{'hardware-aware' if balanced else 'even'} pipeline ({num_stages} stages)",
    )
    return PipelineChoice(plan, part, order)


def balanced_pipeline(
    model: ModelSpec,
    cluster: ClusterSpec,
    memory: MemoryModel,
    devices: Sequence[str],
    num_stages: int,
    global_batch: int,
    micro_batch: int,
    k: int = 1,
    params: CostParams | None = None,
) -> PipelineChoice:
    """Whale §3.3.2: devices sorted by memory (earlier stages larger), the cut balanced by speed."""
    return _pipeline(
        model, cluster, memory, devices, num_stages, global_batch, micro_batch, k, params, balanced=True
    )


def even_pipeline(
    model: ModelSpec,
    cluster: ClusterSpec,
    memory: MemoryModel,
    devices: Sequence[str],
    num_stages: int,
    global_batch: int,
    micro_batch: int,
    k: int = 1,
    params: CostParams | None = None,
) -> PipelineChoice:
    """The baseline: devices in Whale's sequential order, the homogeneous planner's cut."""
    return _pipeline(
        model, cluster, memory, devices, num_stages, global_batch, micro_batch, k, params, balanced=False
    )


def memory_reasons(plan: HybridPlan, memory: MemoryModel) -> list[str]:
    """Why ``plan`` does not fit, one line per device and TaskGraph over its usable memory (empty: fits).

    Replicate TaskGraphs: ``stage_bytes`` of the device's share (pipelines: the schedule's stash
    of micro-batches and buffers); split TaskGraphs: ``split_profile`` at the device's fraction. A
    device in several TaskGraphs (shared VirtualDevices) holds the sum.
    """
    need: dict[str, float] = {}
    parts: dict[str, list[str]] = {}
    P = len(plan.task_graphs)
    pipelined = plan.num_micro_batches > 1
    pplan = plan.to_plan() if pipelined else None
    b = plan.micro_batch_size
    for t, tg in enumerate(plan.task_graphs):
        for r, vd in enumerate(tg.virtual_devices):
            batch = plan.replica_batch(r)
            shares = tg.shares(r, batch)
            for j, d in enumerate(vd.devices):
                if tg.primitive == "split":
                    w = tg.split_shares or (1,) * tg.degree
                    total = sum(w)
                    nbytes = split_profile(memory, tg.first_layer, tg.last_layer, batch, total).memory(
                        j, w[j]
                    )
                elif pplan is not None:
                    n = max(1, shares[j] // b)
                    stash, buf = schedule_samples(P, t, b, n, pplan.group_size(n))
                    nbytes = memory.stage_bytes(tg.first_layer, tg.last_layer, stash, buf).total
                else:
                    nbytes = memory.stage_bytes(tg.first_layer, tg.last_layer, shares[j], 0).total
                need[d] = need.get(d, 0.0) + nbytes
                parts.setdefault(d, []).append(f"task_graphs.{t} {nbytes / 1e9:.2f}")
    out = []
    for d, nbytes in need.items():
        cap = memory.device_capacity_of(node_of(d))
        if nbytes > cap:
            out.append(f"{d}: {nbytes / 1e9:.2f} GB > {cap / 1e9:.2f} GB usable ({', '.join(parts[d])})")
    return out
