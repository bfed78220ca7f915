"""Whale's inter-TaskGraph load balancing (§3.3.2): memory-ordered stages, speed-balanced partition.

Under 1F1B-like schedules stage r of P stashes more micro-batches' activations than stage r+1
(kFkB: min(N, (P − r)·k), ``simulator.pipeline.expected_peak_stashed``), so Whale sorts the
devices of the VirtualDevices by memory capacity, high to low, and gives the earlier TaskGraphs
the larger devices (``stage_slots(order="memory")``). It then cuts the layers, in topological
order, into P contiguous TaskGraphs that balance compute by each device's speed under each
device's memory bound.

Decision (the paper gives the partition one sentence, "apply Algorithm 1 to balance the computing
FLOP among operations, subject to the memory bound"): Algorithm 1's shift to the valley with the
least FLOP load is ill-defined for *contiguous* layer ranges (a valley two stages away can only
be reached by moving every boundary in between), so ``balanced_partition`` solves the same goal
exactly: it minimises the largest stage time t_r = Σ_{l in stage r} (fwd_l + bwd_l) on stage r's
device type (ties: the least total), subject to every stage's bytes (``MemoryModel.stage_bytes``
with the schedule's stash and buffers, ``search.pipeline.candidates.schedule_samples``) fitting
its smallest device. Balancing FLOP shares ∝ DF_r and equalising t_r are the same thing when time
is FLOPs / DF; the compute model's per-layer times also see bandwidth-bound layers. A dynamic
programme over cut points, O(P·L²) with prefix sums.

The baseline ``even_partition`` is what a homogeneous planner would do: the same cut for equal
devices (every stage timed on the first stage's device type, no memory bound), on the devices in
Whale's default sequential order (§3.2.1, ``order="sequential"``).

Shapes: P stages, L layers; ranges [(first, last)] * P.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from search.feasibility import MemoryModel
from search.hybrid.memory import device_type_of, node_of
from search.pipeline.candidates import schedule_samples as schedule_samples  # the one stage memory rule
from simulator.analytical.compute import layer_times
from simulator.analytical.params import CostParams
from simulator.spec import ClusterSpec, DeviceType, ModelSpec

Order = Literal["memory", "sequential"]


class InfeasiblePartition(ValueError):
    """No contiguous cut of the layers fits every stage's memory (the message says which bound)."""


@dataclass(frozen=True)
class StageSlot:
    """The devices of one pipeline stage (one per nested replica), its speed and its memory bound."""

    devices: tuple[str, ...]
    device: DeviceType  # the slowest device type among them: it bounds the stage
    capacity: float  # usable bytes of the smallest of them


@dataclass(frozen=True)
class Partition:
    """Layer ranges per stage with their per-micro-batch seconds and bytes against capacity."""

    ranges: tuple[tuple[int, int], ...]
    seconds: tuple[float, ...]  # forward + backward of one micro-batch on the stage's device type
    bytes: tuple[float, ...]  # MemoryModel.stage_bytes(...).total under the schedule
    capacity: tuple[float, ...]

    @property
    def fits(self) -> bool:
        return all(b <= c for b, c in zip(self.bytes, self.capacity, strict=True))

    @property
    def bottleneck(self) -> float:
        return max(self.seconds)


def type_step_seconds(
    model: ModelSpec, device: DeviceType, batch: int, params: CostParams | None = None
) -> float:
    """Forward + backward seconds of the whole model for ``batch`` samples on ``device``.

    The one compute model (``layer_times`` with the full ``params``: dtype peak per op class,
    memory bandwidth, launch cost, efficiencies, a stored profile when ``params`` has one), not
    the type's FP32 peak: in mixed precision a V100 is ~3-4x a P100, in FP32 ~1.6x, and
    bandwidth-bound layers follow 900 / 732 GB/s, not 15.7 / 9.3 TFLOPS (issue 15's rule).
    """
    return layer_times(model, device, max(1, batch), params or CostParams()).step


def stage_slots(
    cluster: ClusterSpec,
    memory: MemoryModel,
    devices: Sequence[str],
    num_stages: int,
    order: Order = "memory",
    params: CostParams | None = None,
    batch: int | None = None,
) -> list[StageSlot]:
    """Cut ``devices`` into ``num_stages`` stages of len(devices) / num_stages nested replicas each.

    ``memory``: sorted by usable memory, high to low (ties: faster first, then given order), stage r
    takes the next D devices (Whale §3.3.2). ``sequential``: Whale's default §3.2.1, nested replica
    d's stage r is ``devices[d·P + r]``. Speeds (the tie-break, and each stage's slowest type) are
    ``type_step_seconds`` of ``memory.model`` at ``batch`` samples (default: the model's per-device
    batch) with ``params``, the compute model the partition and the cost model use.
    """
    model = memory.model
    rows = batch if batch is not None else model.batch_size
    step: dict[str, float] = {}

    def seconds(t: DeviceType) -> float:
        if t.name not in step:
            step[t.name] = type_step_seconds(model, t, rows, params)
        return step[t.name]

    n = len(devices)
    if num_stages < 1 or n % num_stages:
        raise ValueError(f"num_stages: must divide the {n} devices, got {num_stages}")
    d = n // num_stages
    if order == "memory":
        idx = sorted(
            range(n),
            key=lambda i: (
                -memory.device_capacity_of(node_of(devices[i])),
                seconds(device_type_of(cluster, devices[i])),
                i,
            ),
        )
        groups = [[devices[i] for i in idx[r * d : (r + 1) * d]] for r in range(num_stages)]
    elif order == "sequential":
        groups = [[devices[rep * num_stages + r] for rep in range(d)] for r in range(num_stages)]
    else:
        raise ValueError(f"order: must be 'memory' or 'sequential', got {order!r}")
    out = []
    for g in groups:
        types = [device_type_of(cluster, x) for x in g]
        slowest = max(types, key=seconds)
        cap = min(memory.device_capacity_of(node_of(x)) for x in g)
        out.append(StageSlot(tuple(g), slowest, cap))
    return out


@dataclass(frozen=True)
class _Tables:
    seconds: list[np.ndarray]  # per stage: prefix sums (L+1,) of fwd + bwd per micro-batch
    static: np.ndarray  # (L+1,) prefix of parameters + gradients + optimizer state
    per_sample: np.ndarray  # (L+1,) prefix of activation bytes per stashed sample
    boundary: np.ndarray  # (L+1, L+1): boundary_bytes(a, b) per sample, a < b


def _tables(
    model: ModelSpec,
    memory: MemoryModel,
    types: Sequence[DeviceType],
    micro_batch: int,
    params: CostParams,
) -> _Tables:
    n = len(model.layers)
    seconds = []
    cache: dict[str, np.ndarray] = {}
    for t in types:
        if t.name not in cache:
            lt = layer_times(model, t, micro_batch, params)
            cache[t.name] = np.concatenate([[0.0], np.cumsum(lt.fwd + lt.bwd)])
        seconds.append(cache[t.name])
    static = np.zeros(n + 1)
    act = np.zeros(n + 1)
    for layer in range(n):
        sm = memory.stage_bytes(layer, layer + 1, 1, 0)
        static[layer + 1] = static[layer] + sm.params + sm.grads + sm.optimizer
        act[layer + 1] = act[layer] + sm.activations
    boundary = np.zeros((n + 1, n + 1))
    for a in range(n):
        for b in range(a + 1, n + 1):
            boundary[a, b] = memory.boundary_bytes(a, b)
    return _Tables(seconds, static, act, boundary)


def evaluate_partition(
    model: ModelSpec,
    memory: MemoryModel,
    slots: Sequence[StageSlot],
    ranges: Sequence[tuple[int, int]],
    micro_batch: int,
    micro_batches: int,
    k: int = 1,
    params: CostParams | None = None,
) -> Partition:
    """Seconds and bytes of ``ranges`` on ``slots`` (bytes straight from ``MemoryModel.stage_bytes``)."""
    params = params or CostParams()
    P = len(slots)
    if len(ranges) != P:
        raise ValueError(f"ranges: {len(ranges)} ranges for {P} stages")
    secs, nbytes = [], []
    for r, ((a, b), slot) in enumerate(zip(ranges, slots, strict=True)):
        lt = layer_times(model, slot.device, micro_batch, params)
        secs.append(float(lt.fwd[a:b].sum() + lt.bwd[a:b].sum()))
        stash, buf = schedule_samples(P, r, micro_batch, micro_batches, k)
        nbytes.append(memory.stage_bytes(a, b, stash, buf).total)
    return Partition(tuple(ranges), tuple(secs), tuple(nbytes), tuple(s.capacity for s in slots))


def balanced_partition(
    model: ModelSpec,
    memory: MemoryModel,
    slots: Sequence[StageSlot],
    micro_batch: int,
    micro_batches: int,
    k: int = 1,
    params: CostParams | None = None,
    *,
    memory_bound: bool = True,
    timing: Sequence[DeviceType] | None = None,
) -> Partition:
    """The contiguous cut minimising the slowest stage's time (ties: least total) under memory.

    ``timing`` overrides the device type each stage is timed on (``even_partition`` times every
    stage on one type). Raises ``InfeasiblePartition`` when no cut fits, ValueError on bad sizes.
    """
    params = params or CostParams()
    P, L = len(slots), len(model.layers)
    if P < 1 or P > L:
        raise ValueError(f"slots: need 1..{L} stages (one layer at least each), got {P}")
    if micro_batch < 1 or micro_batches < 1 or k < 1:
        raise ValueError(
            f"micro_batch, micro_batches, k: must be >= 1, got {micro_batch}, {micro_batches}, {k}"
        )
    types = list(timing) if timing is not None else [s.device for s in slots]
    tab = _tables(model, memory, types, micro_batch, params)
    inf = float("inf")
    best_b = np.full((P, L + 1), inf)
    best_s = np.full((P, L + 1), inf)
    arg = np.zeros((P, L + 1), dtype=int)
    for r in range(P):
        stash, buf = schedule_samples(P, r, micro_batch, micro_batches, k)
        T = tab.seconds[r]
        for j in range(r + 1, L - (P - 1 - r) + 1):
            i = np.arange(r, j) if r else np.array([0])
            t = T[j] - T[i]
            if memory_bound:
                mem = (
                    tab.static[j]
                    - tab.static[i]
                    + (tab.per_sample[j] - tab.per_sample[i]) * stash
                    + tab.boundary[i, j] * buf
                )
                ok = mem <= slots[r].capacity
            else:
                ok = np.ones_like(t, dtype=bool)
            if r:
                prev_b, prev_s = best_b[r - 1, i], best_s[r - 1, i]
            else:
                prev_b, prev_s = np.zeros_like(t), np.zeros_like(t)
            cand_b = np.where(ok, np.maximum(prev_b, t), inf)
            cand_s = np.where(ok, prev_s + t, inf)
            m = cand_b.min()
            if not np.isfinite(m):
                continue
            near = cand_b <= m * (1 + 1e-9)
            pick = int(np.argmin(np.where(near, cand_s, inf)))
            best_b[r, j], best_s[r, j], arg[r, j] = cand_b[pick], cand_s[pick], int(i[pick])
    if not np.isfinite(best_b[P - 1, L]):
        raise InfeasiblePartition(
            f"stages: no cut of {L} layers into {P} stages fits memory at micro-batch {micro_batch} "
            f"x {micro_batches} (k={k}); usable GB per stage: "
            + ", ".join(f"{s.capacity / 1e9:.2f} ({'/'.join(s.devices)})" for s in slots)
        )
    cuts = [L]
    for r in range(P - 1, 0, -1):
        cuts.append(int(arg[r, cuts[-1]]))
    cuts.append(0)
    cuts.reverse()
    ranges = [(cuts[r], cuts[r + 1]) for r in range(P)]
    return evaluate_partition(model, memory, slots, ranges, micro_batch, micro_batches, k, params)


def even_partition(
    model: ModelSpec,
    memory: MemoryModel,
    slots: Sequence[StageSlot],
    micro_batch: int,
    micro_batches: int,
    k: int = 1,
    params: CostParams | None = None,
) -> Partition:
    """The homogeneous planner's cut (equal compute per stage on one device type, memory ignored),
    evaluated on the real ``slots``: the baseline (its ``fits`` may be False)."""
    ref = slots[0].device
    return balanced_partition(
        model,
        memory,
        slots,
        micro_batch,
        micro_batches,
        k,
        params,
        memory_bound=False,
        timing=[ref] * len(slots),
    )
