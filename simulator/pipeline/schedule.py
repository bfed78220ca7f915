"""kFkB pipeline schedules (Ada-Grouper §3.2.1, §5.4) as per-stage action lists with paired Send/Recv.

A schedule is, for every pipeline stage r = 0 .. P-1 (0-based: stage 0 holds the first layers and
feeds stage 1; stage P-1 computes the loss), the ordered list of actions its process executes in
one training step over N micro-batches:

- ``F`` / ``B``: forward / full backward of one micro-batch on that stage;
- ``SEND_F`` (activation to r+1), ``RECV_F`` (activation from r-1), ``SEND_B`` (input gradient to
  r-1), ``RECV_B`` (output gradient from r+1). Sends and receives are non-blocking posts; a compute
  action waits for the receive it consumes; sends are waited for at the end of the step.

kFkB (the paper's construction, §5.4): "generate k copies of the 1F1B plan and cross-merge them".
Copy j of 1F1B handles micro-batches j, j+k, j+2k, ...; merging them step by step turns every 1F1B
forward (backward) into a *group* of k forwards (backwards) of consecutive micro-batches. So stage r
runs min(G, P-r-1) forward groups of warm-up, then alternates one forward group and one backward
group (early backward), then drains the remaining backward groups, where G = ceil(N / k) groups; the
last group is shorter when k does not divide N (a decision: the paper assumes it does). k = 1 is
1F1B and k = N is GPipe. Stage r stashes at most min(N, (P-r)·k) micro-batches' activations.

Send/Recv placement (pairing, §5.3): a send is posted right after the compute that produced its
tensor ("cross stage communications triggered immediately after each stage computation delivers
its outputs", §3). The receives a compute group consumes are posted when the group *before* it on
the same stage starts (the first group's at the start of the step): one group of look-ahead, so a
transfer overlaps a whole group of computation (the paper's buffer queue) while a stage never holds
more than two groups of posted receive buffers per direction. Every directed link carries one kind
of message (activations down, gradients up) in micro-batch order on both ends, so sends and
receives pair up in posting order, which is how gloo and NCCL match untagged point-to-point calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Op(StrEnum):
    """An action's kind; the values are the names torch.distributed.pipelining uses."""

    F = "F"
    B = "B"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"

    @property
    def is_compute(self) -> bool:
        return self in (Op.F, Op.B)


@dataclass(frozen=True, order=True)
class Action:
    """One action of a stage: ``op`` on micro-batch ``mb`` of stage ``stage`` (the stage it runs on)."""

    stage: int
    op: Op
    mb: int

    def __str__(self) -> str:
        return f"{self.stage}{self.op.value}{self.mb}"

    @staticmethod
    def parse(text: str) -> Action:
        """The inverse of ``str``: '2SEND_F5' -> Action(2, SEND_F, 5)."""
        digits = len(text) - len(text.lstrip("0123456789"))
        tail = text[digits:]
        for op in sorted(Op, key=lambda o: -len(o.value)) if digits else ():
            if tail.startswith(op.value) and tail[len(op.value) :].isdigit():
                return Action(int(text[:digits]), op, int(tail[len(op.value) :]))
        raise ValueError(f"not an action: {text!r} (expected e.g. '0F3' or '1SEND_B2')")


@dataclass(frozen=True)
class Schedule:
    """The action lists of one pipeline replica: ``stages[r]`` is what stage r's process runs.

    Shapes: ``len(stages) == num_stages``; each list holds N F's and N B's, plus one SEND per F
    (stages 0..P-2) and per B (stages 1..P-1) and the matching RECVs on the neighbour.
    """

    num_stages: int
    num_micro_batches: int
    k: int
    stages: tuple[tuple[Action, ...], ...]

    def compute_order(self, stage: int) -> tuple[Action, ...]:
        """Stage ``stage``'s F and B actions in order (communication removed)."""
        return tuple(a for a in self.stages[stage] if a.op.is_compute)

    def peak_stashed(self, stage: int) -> int:
        """Most micro-batches whose forward ran and backward has not, on ``stage``, at any point."""
        live = peak = 0
        for a in self.compute_order(stage):
            live += 1 if a.op is Op.F else -1
            peak = max(peak, live)
        return peak

    def to_rows(self) -> list[list[str]]:
        """One row of action strings per stage (torch's schedule CSV layout)."""
        return [[str(a) for a in row] for row in self.stages]


def groups_of(num_micro_batches: int, k: int) -> list[range]:
    """Micro-batches 0..N-1 cut into consecutive groups of k (the last one shorter if k ∤ N)."""
    return [range(s, min(s + k, num_micro_batches)) for s in range(0, num_micro_batches, k)]


def compute_groups(num_stages: int, num_micro_batches: int, k: int, stage: int) -> list[tuple[Op, range]]:
    """Stage ``stage``'s kFkB compute order as (F or B, micro-batch group) in execution order."""
    groups = groups_of(num_micro_batches, k)
    warmup = min(len(groups), num_stages - stage - 1)
    out: list[tuple[Op, range]] = [(Op.F, g) for g in groups[:warmup]]
    fwd, bwd = warmup, 0
    while fwd < len(groups):
        out.append((Op.F, groups[fwd]))
        fwd += 1
        out.append((Op.B, groups[bwd]))
        bwd += 1
    out.extend((Op.B, g) for g in groups[bwd:])
    return out


def kfkb(num_stages: int, num_micro_batches: int, k: int) -> Schedule:
    """The kFkB schedule of ``num_stages`` stages over ``num_micro_batches`` micro-batches.

    Raises ValueError naming the argument when P, N or k is not a positive integer. k may exceed N
    (it is then N: GPipe).
    """
    for name, value in (("num_stages", num_stages), ("num_micro_batches", num_micro_batches), ("k", k)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {value!r}")
    k = min(k, num_micro_batches)
    last = num_stages - 1
    rows = []
    for r in range(num_stages):
        order = compute_groups(num_stages, num_micro_batches, k, r)
        row: list[Action] = []
        for gi, (op, mbs) in enumerate(order):
            if gi == 0:
                row.extend(_recvs(order[0], r, last))
            if gi + 1 < len(order):
                # the next group's receives are posted as this group starts (one group of look-ahead)
                row.extend(_recvs(order[gi + 1], r, last))
            for mb in mbs:
                row.append(Action(r, op, mb))
                if op is Op.F and r < last:
                    row.append(Action(r, Op.SEND_F, mb))
                if op is Op.B and r > 0:
                    row.append(Action(r, Op.SEND_B, mb))
        rows.append(tuple(row))
    return Schedule(num_stages, num_micro_batches, k, tuple(rows))


def _recvs(group: tuple[Op, range], stage: int, last: int) -> list[Action]:
    op, mbs = group
    if op is Op.F and stage > 0:
        return [Action(stage, Op.RECV_F, mb) for mb in mbs]
    if op is Op.B and stage < last:
        return [Action(stage, Op.RECV_B, mb) for mb in mbs]
    return []


def expected_peak_stashed(num_stages: int, num_micro_batches: int, k: int, stage: int) -> int:
    """min(N, (P - r)·k), 0-based stage r: the activation-stash bound of kFkB (k capped at N)."""
    return min(num_micro_batches, (num_stages - stage) * min(k, num_micro_batches))
