"""Event simulation of a pipeline schedule's action lists: deadlock check and pipeline length.

Semantics (what torch.distributed.pipelining's runtime does with gloo/NCCL point-to-point calls):

- a stage executes its actions in order; ``RECV_*`` and ``SEND_*`` are non-blocking posts taking
  no time; ``F`` / ``B`` start when the stage is free and, unless on the first (F) or last (B)
  stage, when the tensor their receive posted has arrived, and last ``fwd[r]`` / ``bwd[r]``;
- the i-th send posted on a directed link (src -> dst) pairs with the i-th receive dst posted
  from src (posting order, as untagged p2p calls match); a pair whose micro-batches differ is an
  error (``PairingError``);
- a transfer starts when its send is posted, its receive is posted (``rendezvous``: the receiver
  only drains a message into a posted buffer) and the link finished the previous transfer (one
  link carries one message at a time per direction); it lasts ``transfer[(src, dst)]`` seconds;
- a stage's step ends when its last action ran and all its sends completed.
``blocking_sends=True`` is the stricter model of a blocking ``send`` (the sender waits until its
transfer completed); a schedule free of deadlock under it is free of deadlock under both.

Pipeline length (Ada-Grouper §4.3) = the latest stage end. With all durations 0 the simulation
still checks that every stage finishes (``Deadlock`` otherwise) and that sends and receives pair.

``host`` (optional, [P] seconds): the runtime's own work on the stage's process before each compute
action (dispatching the action, posting its receives and sends: host time that is neither compute
nor waiting, ``runtime.pipeline.profile.Profile.host``); it overlaps a wait for the input, so a
compute starts at max(stage free + host, input arrived). Without it the runtime costs nothing.

Shapes: ``fwd``, ``bwd``, ``host``: [P] seconds per micro-batch; ``transfer``: {(r, r±1): seconds per
message}.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from simulator.pipeline.schedule import Action, Op, Schedule


class Deadlock(RuntimeError):
    """No stage can make progress but some have actions left."""


class PairingError(RuntimeError):
    """A send and the receive it pairs with (by posting order) are for different micro-batches."""


@dataclass(frozen=True)
class Timeline:
    """When every action of every stage started and ended, and the pipeline length."""

    spans: tuple[tuple[tuple[Action, float, float], ...], ...]  # per stage: (action, start, end)
    stage_end: tuple[float, ...]
    # when every send's transfer completed (the send's buffer can be freed), by its action
    send_done: dict[Action, float] = field(default_factory=dict)

    @property
    def length(self) -> float:
        return max(self.stage_end)


@dataclass
class _Link:
    sends: list[tuple[int, float]] = field(default_factory=list)  # (mb, post time)
    recvs: list[tuple[int, float]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # end of transfer i


def simulate(
    schedule: Schedule,
    fwd: Sequence[float] | None = None,
    bwd: Sequence[float] | None = None,
    transfer: Mapping[tuple[int, int], float] | None = None,
    *,
    rendezvous: bool = True,
    blocking_sends: bool = False,
    host: Sequence[float] | None = None,
) -> Timeline:
    """Run ``schedule`` with the given durations (default 0); raise Deadlock or PairingError."""
    P = schedule.num_stages
    fwd = list(fwd) if fwd is not None else [0.0] * P
    bwd = list(bwd) if bwd is not None else [0.0] * P
    if len(fwd) != P or len(bwd) != P:
        raise ValueError(f"fwd and bwd need {P} stage times, got {len(fwd)} and {len(bwd)}")
    transfer = transfer or {}
    host = list(host) if host is not None else [0.0] * P
    if len(host) != P:
        raise ValueError(f"host needs {P} stage times, got {len(host)}")
    links: dict[tuple[int, int], _Link] = {}
    recv_slot: dict[tuple[int, Op, int], tuple[tuple[int, int], int]] = {}
    send_slot: dict[tuple[int, Op, int], tuple[tuple[int, int], int]] = {}
    pc = [0] * P
    forwarded: set[tuple[int, int]] = set()
    clock = [0.0] * P
    spans: list[list[tuple[Action, float, float]]] = [[] for _ in range(P)]

    def link_of(a: Action) -> tuple[int, int]:
        if a.op is Op.SEND_F:
            return (a.stage, a.stage + 1)
        if a.op is Op.SEND_B:
            return (a.stage, a.stage - 1)
        if a.op is Op.RECV_F:
            return (a.stage - 1, a.stage)
        return (a.stage + 1, a.stage)

    def settle(key: tuple[int, int]) -> None:
        ln = links[key]
        while len(ln.arrivals) < min(len(ln.sends), len(ln.recvs)):
            i = len(ln.arrivals)
            (smb, st), (rmb, rt) = ln.sends[i], ln.recvs[i]
            if smb != rmb:
                raise PairingError(
                    f"link {key[0]}->{key[1]}: send #{i} carries micro-batch {smb} but receive #{i} "
                    f"expects {rmb}"
                )
            start = max(st, rt if rendezvous else st, ln.arrivals[-1] if ln.arrivals else 0.0)
            ln.arrivals.append(start + transfer.get(key, 0.0))

    def arrival(stage: int, op: Op, mb: int) -> float | None:
        slot = recv_slot.get((stage, op, mb))
        if slot is None:
            raise Deadlock(f"stage {stage} computes micro-batch {mb} before posting its {op.value}")
        key, i = slot
        arr = links[key].arrivals
        return arr[i] if i < len(arr) else None

    def step(r: int) -> bool:
        a = schedule.stages[r][pc[r]]
        t = clock[r]
        if a.op in (Op.RECV_F, Op.RECV_B):
            key = link_of(a)
            ln = links.setdefault(key, _Link())
            recv_slot[(r, a.op, a.mb)] = (key, len(ln.recvs))
            ln.recvs.append((a.mb, t))
            settle(key)
            spans[r].append((a, t, t))
            return True
        if a.op in (Op.SEND_F, Op.SEND_B):
            key = link_of(a)
            ln = links.setdefault(key, _Link())
            if (r, a.op, a.mb) not in send_slot:
                send_slot[(r, a.op, a.mb)] = (key, len(ln.sends))
                ln.sends.append((a.mb, t))
                settle(key)
            if blocking_sends:
                _, i = send_slot[(r, a.op, a.mb)]
                if i >= len(ln.arrivals):
                    return False
                clock[r] = ln.arrivals[i]
            spans[r].append((a, t, clock[r]))
            return True
        if a.op is Op.B and (r, a.mb) not in forwarded:
            raise ValueError(f"stage {r} runs the backward of micro-batch {a.mb} before its forward")
        if a.op is Op.F:
            forwarded.add((r, a.mb))
        needs = (
            (r, Op.RECV_F, a.mb)
            if a.op is Op.F and r > 0
            else (r, Op.RECV_B, a.mb)
            if a.op is Op.B and r < P - 1
            else None
        )
        ready = t + host[r]
        if needs is not None:
            got = arrival(*needs)
            if got is None:
                return False
            ready = max(ready, got)
        end = ready + (fwd[r] if a.op is Op.F else bwd[r])
        spans[r].append((a, ready, end))
        clock[r] = end
        return True

    progress = True
    while progress:
        progress = False
        for r in range(P):
            while pc[r] < len(schedule.stages[r]) and step(r):
                pc[r] += 1
                progress = True
    stuck = [r for r in range(P) if pc[r] < len(schedule.stages[r])]
    if stuck:
        where = ", ".join(f"stage {r} at {schedule.stages[r][pc[r]]}" for r in stuck)
        raise Deadlock(f"no stage can progress: {where}")
    for key, ln in links.items():
        if len(ln.sends) != len(ln.recvs):
            raise PairingError(f"link {key[0]}->{key[1]}: {len(ln.sends)} sends but {len(ln.recvs)} receives")
    ends = []
    for r in range(P):
        done = [links[k].arrivals[i] for (s, _, _), (k, i) in send_slot.items() if s == r]
        ends.append(max([clock[r], *done]))
    send_done = {Action(s, op, mb): links[k].arrivals[i] for (s, op, mb), (k, i) in send_slot.items()}
    return Timeline(tuple(tuple(s) for s in spans), tuple(ends), send_done)
