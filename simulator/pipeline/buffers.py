"""Point-to-point buffers a kFkB stage can hold at once, derived from the action lists (issue 17).

The memory rule (``search.pipeline.candidates.schedule_samples``) charges a stage its stashed
activations and its point-to-point buffers. This module counts the buffers from the planner's
action lists (``simulator.pipeline.schedule.kfkb``), not from a formula, under these lifetimes
(on stage r, for micro-batch m):

- ``RECV_F m`` (the input activation, the *input side*): from its post until ``F m`` ends, the
  paper's buffer queue ("when a computation ... is completed, the liveness of its inputs is
  terminated", Ada-Grouper §3); what backward needs afterwards is the stash's.
- ``RECV_B m`` (the output gradient, *output side*): from its post until ``B m`` ends.
- ``SEND_B m`` (the input gradient, *input side*, a tensor the backward allocates): from its post
  until its transfer completes. The list does not say when that is; what it does say is an
  upper bound: the transfer has completed when the consumer (``B m`` on stage r-1) starts, so
  before any action of stage r that the consumer *happens before* (program order on every stage,
  and a send before the compute that consumes it). The buffer is counted until the earliest such
  action of stage r, or to the end of the step when there is none (sends of the drain phase).
- ``SEND_F m`` (the output activation) adds nothing: the tensor sent is the forward's output,
  which the stash holds from ``F m`` to ``B m``, and the same happens-before argument puts the
  send's completion before ``B m`` on stage r (``send_release`` lets the tests check it).

Counting: while each action of stage r runs, the input-side and the output-side buffers live
(posted, not yet released). Every ordering of completions the action lists allow is covered: a
receive is released at a fixed place and a send no later than the bound above, so the count at
any moment of any execution is at most the count at the action running then
(``tests/simulator/pipeline/test_buffers.py`` checks this against the event simulation with
random durations). The memory rule costs a buffered micro-batch at the stage's input plus output
bytes per sample (``MemoryModel.stage_bytes``), so the peak it needs is the largest, over the
actions, of max(input side, output side): an upper bound of the exact peak input·in + output·out.

Results (checked by the tests): GPipe (k = N) holds N on each side of every inner stage (all of
a step's receives are posted at its start); 1F1B and kFkB hold 2k on the output side (the current
and next group's gradient receives) and, on the input side of stage r > 0, up to min(N, (P - r +
1)·k) (at least 3k on the last stage): the input gradients of the drain phase's backward groups
may all still be in flight when the step's computation ends.
"""

from __future__ import annotations

from functools import lru_cache

from simulator.pipeline.schedule import Op, Schedule, kfkb

# A send's consumer: the compute on the neighbour that waits for its transfer.
_SEND_CONSUMER = {Op.SEND_F: (1, Op.F), Op.SEND_B: (-1, Op.B)}
_RECV_CONSUMER = {Op.RECV_F: Op.F, Op.RECV_B: Op.B}


def _positions(schedule: Schedule) -> dict[tuple[int, Op, int], int]:
    return {(a.stage, a.op, a.mb): i for row in schedule.stages for i, a in enumerate(row)}


def _earliest_reached(schedule: Schedule, target: int) -> list[list[int]]:
    """``e[q][i]``: the index of the first action of stage ``target`` that action i of stage q
    happens before or is (``len`` of target's list when none does).

    Happens-before: program order on each stage, and a send before the compute consuming it.
    The relation is acyclic (the schedules are deadlock-free), so sweeping every list backwards
    until nothing changes reaches the fixed point.
    """
    pos = _positions(schedule)
    rows = schedule.stages
    end = len(rows[target])
    e = [[end] * (len(row) + 1) for row in rows]
    e[target] = [*range(end), end]
    changed = True
    while changed:
        changed = False
        for q, row in enumerate(rows):
            if q == target:
                continue
            eq = e[q]
            for i in range(len(row) - 1, -1, -1):
                a = row[i]
                best = eq[i + 1]
                if a.op in _SEND_CONSUMER:
                    d, op = _SEND_CONSUMER[a.op]
                    best = min(best, e[q + d][pos[(q + d, op, a.mb)]])
                if best < eq[i]:
                    eq[i] = best
                    changed = True
    return e


def send_release(schedule: Schedule, stage: int) -> dict[tuple[Op, int], int]:
    """For every send of ``stage``: the index in its list from which the send's transfer has
    surely completed (``len`` of the list: only at the end of the step)."""
    pos = _positions(schedule)
    reach = _earliest_reached(schedule, stage)
    out = {}
    for a in schedule.stages[stage]:
        if a.op in _SEND_CONSUMER:
            d, op = _SEND_CONSUMER[a.op]
            q = stage + d
            out[(a.op, a.mb)] = reach[q][pos[(q, op, a.mb)]]
    return out


def live_buffers(schedule: Schedule, stage: int) -> list[tuple[int, int]]:
    """(input side, output side) micro-batch buffers live while each action of ``stage`` runs."""
    row = schedule.stages[stage]
    pos = _positions(schedule)
    release = send_release(schedule, stage)
    inp = [0] * (len(row) + 1)
    out = [0] * (len(row) + 1)
    for i, a in enumerate(row):
        if a.op in _RECV_CONSUMER:
            side, until = (inp if a.op is Op.RECV_F else out), pos[(stage, _RECV_CONSUMER[a.op], a.mb)] + 1
        elif a.op is Op.SEND_B:
            side, until = inp, release[(a.op, a.mb)]
        else:
            continue
        side[i] += 1
        side[until] -= 1
    live, li, lo = [], 0, 0
    for i in range(len(row)):
        li += inp[i]
        lo += out[i]
        live.append((li, lo))
    return live


@lru_cache(maxsize=4096)
def peak_buffered(num_stages: int, num_micro_batches: int, k: int, stage: int) -> int:
    """Micro-batches of point-to-point buffers stage ``stage`` (0-based) of a kFkB pipeline needs:
    the largest max(input side, output side) over its actions (module docstring). k is capped at N."""
    live = live_buffers(kfkb(num_stages, num_micro_batches, min(k, num_micro_batches)), stage)
    return max((max(pair) for pair in live), default=0)
