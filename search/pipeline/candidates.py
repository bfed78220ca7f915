"""(k, b) candidates on the memory-limit curve (Ada-Grouper §4.2, Fig. 3) and a plan's memory check.

A pipeline replica trains B samples per step (its batch share) as n = B / b micro-batches of b,
in groups of k (kFkB). Stage r (0-based) of P stashes min(n, (P - r)·k) micro-batches of
activations and holds the point-to-point buffers its action lists can have live at once
(``simulator.pipeline.buffers.peak_buffered``: receives from their post until consumed, input
gradients until their transfer surely completed; e.g. 2k / 4k / 3k / 3k for P = 4 and GPipe n on
every stage). ``schedule_samples`` is that rule, the one the hybrid planner's partition applies
too. Until 2026-11-25d the buffers were 3 groups of k micro-batches on every stage, which counted
3n for GPipe where at most n can exist. Memory per stage comes from the sampler's memory model
(``MemoryModel.stage_bytes``: parameters, gradients, optimizer state, stashed activations, buffers)
against the usable memory of the smallest GPU among the stage's devices.

The curve: for each k (a divisor of n, so every group is full; k = 1 is 1F1B, k = n GPipe) the
largest b that divides B, leaves n ≥ k and fits every stage. A point (k, b) is *below the curve*,
and pruned, when another candidate (k', b') has k' ≥ k and b' ≥ b: it overlaps at least as much
communication with micro-batches at least as large (point A of Fig. 3). What remains is the
Pareto frontier the auto-tuner chooses from.

Re-materialisation (``plan_memory(..., recompute=True)``; 2026-11-27, for GPipe as its paper runs
it, ``runtime.pipeline.stage_net.Recompute``): a stage keeps, per stashed micro-batch, only its
boundary tensors (the input the recomputation starts from and the output the runtime keeps for
backward: ``kept_boundary_bytes`` per sample), and while a backward runs, the recomputed
activations of that one micro-batch (the stage's activation bytes x b, the stash rule's per-sample
bytes). Buffers are the same rule as without it. The input batch of stage 0 is charged to no plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from search.feasibility import MemoryModel, StageMemory
from simulator.pipeline.buffers import peak_buffered
from simulator.pipeline.cost import cut_bytes
from simulator.pipeline.schedule import expected_peak_stashed
from simulator.spec import ModelSpec, Plan


def schedule_samples(
    num_stages: int, stage: int, micro_batch: int, micro_batches: int, k: int
) -> tuple[int, int]:
    """(stashed samples, buffered samples) of ``stage`` (0-based) under kFkB with ``micro_batches``
    micro-batches of ``micro_batch`` in groups of k (capped at the micro-batch count): the memory
    rule of a pipeline stage, for ``MemoryModel.stage_bytes``."""
    kk = min(k, micro_batches)
    return (
        expected_peak_stashed(num_stages, micro_batches, kk, stage) * micro_batch,
        peak_buffered(num_stages, micro_batches, kk, stage) * micro_batch,
    )


@dataclass(frozen=True)
class StageVerdict:
    """One stage's memory under a plan."""

    stage: int
    memory: StageMemory
    capacity: float

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.capacity


@dataclass(frozen=True)
class Candidate:
    """A point on the memory-limit curve: the plan with group size k and micro-batch size b."""

    k: int
    micro_batch_size: int
    micro_batches: int  # per pipeline replica
    plan: Plan
    stages: tuple[StageVerdict, ...]

    @property
    def peak_fraction(self) -> float:
        """The fullest stage's bytes over its capacity (≤ 1 on the curve)."""
        return max(v.memory.total / v.capacity for v in self.stages)


def kept_boundary_bytes(model: ModelSpec, first: int, last: int) -> float:
    """Bytes per sample a re-materialising stage keeps per stashed micro-batch: the input it
    received (what crosses the cut before ``first``, skip connections included: ``cut_bytes``;
    nothing for the first stage) and its output (what crosses after ``last``; the model's output on
    the last stage)."""
    out = cut_bytes(model, last) if last < len(model.layers) else model.layers[-1].activation_bytes
    return (cut_bytes(model, first) if first > 0 else 0.0) + out


def plan_memory(plan: Plan, memory: MemoryModel, recompute: bool = False) -> tuple[StageVerdict, ...]:
    """Every stage's bytes under ``plan`` (its largest replica share decides the stash);
    ``recompute``: run with re-materialisation (module docstring)."""
    P = len(plan.stages)
    n = max(plan.replica_micro_batches(d) for d in range(plan.stages[0].replicate))
    k = plan.group_size(n)
    b = plan.micro_batch_size
    out = []
    for r, st in enumerate(plan.stages):
        stashed, buffered = schedule_samples(P, r, b, n, k)
        if recompute:  # one micro-batch's recomputed activations + every stashed one's boundary
            mem = memory.stage_bytes(st.first_layer, st.last_layer, b, buffered)
            kept = kept_boundary_bytes(memory.model, st.first_layer, st.last_layer) * stashed
            mem = replace(mem, activations=mem.activations + kept)
        else:
            mem = memory.stage_bytes(st.first_layer, st.last_layer, stashed, buffered)
        cap = min(memory.device_capacity_of(dev.rpartition(":")[0]) for dev in st.devices)
        out.append(StageVerdict(r, mem, cap))
    return tuple(out)


def plan_memory_reasons(plan: Plan, memory: MemoryModel, recompute: bool = False) -> list[str]:
    """Why ``plan`` does not fit in memory, one line per stage over its limit (empty: it fits)."""
    gb = 1e9
    return [
        f"plan.stages.{v.stage}: {v.memory.total / gb:.3f} GB > {v.capacity / gb:.3f} GB usable "
        f"(params {v.memory.params / gb:.3f}, grads {v.memory.grads / gb:.3f}, optimizer "
        f"{v.memory.optimizer / gb:.3f}, stashed activations {v.memory.activations / gb:.3f}, "
        f"buffers {v.memory.buffers / gb:.3f})"
        for v in plan_memory(plan, memory, recompute)
        if not v.fits
    ]


def with_kb(template: Plan, k: int, b: int) -> Plan:
    """``template`` with group size k and micro-batch size b (same stages, shares, global batch)."""
    n = template.replica_micro_batches(0) * template.micro_batch_size // b
    schedule = "1f1b" if k == 1 else "gpipe" if k == n else "kfkb"
    data = template.model_dump()
    data.update(
        micro_batch_size=b,
        num_micro_batches=template.global_batch // b,
        schedule=schedule,
        k=k if schedule == "kfkb" else 1,
    )
    return Plan.model_validate(data)


def memory_curve(template: Plan, memory: MemoryModel, max_k: int | None = None) -> list[Candidate]:
    """The (k, b) candidates on the memory-limit curve, k ascending, dominated points pruned.

    ``template`` gives the stages, global batch and shares (all replicas must have the same share);
    its own k and b are ignored. Raises ValueError naming the field when shares differ.
    """
    shares = set(template.batch_shares.values())
    if len(shares) != 1:
        raise ValueError(f"batch_shares: candidates need equal shares per replica, got {sorted(shares)}")
    per_replica = shares.pop()
    sizes = [b for b in range(per_replica, 0, -1) if per_replica % b == 0]
    points: list[Candidate] = []
    for k in range(1, min(per_replica, max_k or per_replica) + 1):
        for b in sizes:
            n = per_replica // b
            if n < k or n % k:
                continue
            plan = with_kb(template, k, b)
            verdicts = plan_memory(plan, memory)
            if all(v.fits for v in verdicts):
                points.append(Candidate(k, b, n, plan, verdicts))
                break
    return [
        c
        for c in points
        if not any(o is not c and o.k >= c.k and o.micro_batch_size >= c.micro_batch_size for o in points)
    ]
