"""End-to-end cross-stage transfer times and per-stage compute profiled from a run's event logs.

Ada-Grouper §4.3 measures "the cross-stage communication time directly" rather than bandwidth.
Here a transfer sample is taken at the receiver: when the runtime's wait for the input of a
compute action (F on stage s > 0, B on stage s < P-1; the ``WAIT_F`` / ``WAIT_B`` events of
``runtime.pipeline.adapter``) blocked for more than ``min_wait_s``, the input arrived when that
wait returned, so ``wait end - max(send post on the neighbour, own receive post, arrival of the
previous message on the link)`` is the end-to-end time of that transfer: the event simulation adds
the wait for a late post and the queueing behind earlier messages itself, so neither is counted
twice (until 2026-11-23 the queueing was in the sample too: with k messages posted back to back a
kFkB sample held up to k transfers and the simulation serialised them again, predicting k = 4 2-5x
too slow). A previous message's arrival is the end of the wait that consumed it when that wait
blocked, else its own posting time (a lower bound). Inputs that were already there when the stage
asked tell only an upper bound and are not sampled. Every process of a host reads the same
``time.monotonic()`` clock (network namespaces share it), so the two ends' times compare.

Logs without wait events (older records, hand-made tests) fall back to the gap rule used until
2026-11-25: a compute "waited" when it started more than ``min_wait_s`` after the stage's previous
action ended, and the input arrived at the compute's start. On the shared host that rule took a
process's own descheduling (tens of ms between two actions while the input had long arrived) for
a transfer, and the simulation charged it to every message of the link: k=4 b=1 U-Net under
preemption at D = 8, load ~13, profiled 2053 ms by the gap rule, 862 ms by the wait rule, 976 /
887 ms measured (``runtime.pipeline.tuner``'s docstring; issue 17).

Compute samples are the F / B event durations per stage (the paper profiles them once; devices are
not preempted). Samples feed a ``simulator.pipeline.cost.TransferWindow`` (moving average).

Unwaited messages (2026-11-25d): a sample exists only for a message its receiver waited for, so
under preemption the samples are the slow messages (GPT k=8 b=1, link 2 -> 1: mean 18-39 ms over
the waited ones against 3.4 ms of bytes / bandwidth), and the simulation charged that mean to every
message, serialised on the link: a step that never ran that way (profiled 1453 ms, 912 measured).
``Profile.messages`` keeps every message in order (None: not waited for) and ``feed(window,
floor)`` counts those at the floor, the unloaded link's bytes / bandwidth (a lower bound of their
transfer; they delayed nothing), so the moving average is over all messages: 803 ms for that plan,
and the curve's pairwise ranking on the three 2026-11-25d runs 1.00 (was 0.67 under preemption).

Host samples (2026-11-25d): the runtime's own time between two compute actions of a stage that is
neither compute nor the wait for an input: dispatching the next action, posting receives and
sends, the Python of torch's schedule loop, the process's own descheduling on a crowded host.
Per stage, the median over compute actions (the first of each step has no predecessor and is not
sampled); the event simulation adds it before each compute (``simulate(host=...)``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from simulator.pipeline.cost import TransferWindow


@dataclass(frozen=True)
class Profile:
    """Per-link transfer samples (seconds, in the order observed) and per-stage median compute."""

    transfers: dict[tuple[int, int], list[float]]
    fwd: list[float]
    bwd: list[float]
    host: list[float] = field(default_factory=list)  # per stage; empty: not measured
    # per link, every message in the order consumed: its sample, or None when the receiver did not
    # wait (the input was there: its transfer is unknown, at most the time until it was asked for)
    messages: dict[tuple[int, int], list[float | None]] = field(default_factory=dict)

    def feed(
        self, window: TransferWindow, floor: Mapping[tuple[int, int], float] | None = None
    ) -> TransferWindow:
        """Add the samples to ``window``. With ``floor`` (per link: the message's transfer on the
        unloaded link, bytes / bandwidth, in the samples' clock) every message counts: one the
        receiver did not wait for adds the floor (it moved no slower than needed and delayed
        nothing), so the window's mean is over all messages, not over the late ones only."""
        if floor is None or not self.messages:
            for link, samples in self.transfers.items():
                for t in samples:
                    window.add(link, t)
            return window
        for link, msgs in self.messages.items():
            for m in msgs:
                if m is not None:
                    window.add(link, m)
                elif link in floor:
                    window.add(link, floor[link])
        return window


def profile_records(records: Mapping[int, Mapping[str, Any]], min_wait_s: float = 1e-3) -> Profile:
    """Transfer and compute samples from ``PipelineRun.records`` (every rank's event log)."""
    by_pos: dict[tuple[int, int], Mapping[str, Any]] = {
        (int(rec["replica"]), int(rec["stage"])): rec for rec in records.values()
    }
    P = 1 + max(s for _, s in by_pos)
    posts: dict[tuple[int, int, str, int], list[float]] = defaultdict(list)
    for (d, s), rec in by_pos.items():
        for kind, mb, t0, _ in rec["events"]:
            if kind in ("SEND_F", "SEND_B", "RECV_F", "RECV_B"):
                posts[(d, s, kind, int(mb))].append(float(t0))
    transfers: dict[tuple[int, int], list[float]] = defaultdict(list)
    messages: dict[tuple[int, int], list[float | None]] = defaultdict(list)
    fwd: dict[int, list[float]] = defaultdict(list)
    bwd: dict[int, list[float]] = defaultdict(list)
    host: dict[int, list[float]] = defaultdict(list)
    for (d, s), rec in sorted(by_pos.items()):
        seen: dict[tuple[str, int], int] = defaultdict(int)
        prev_end = None
        compute_end = None  # the end of the stage's previous compute in this step
        wait: tuple[float, float] | None = None  # the runtime's wait for the next compute's input
        link_free: dict[str, float] = {}  # per direction: when the previous message had arrived (estimate)
        for kind, mb, t0, t1 in rec["events"]:
            if kind in ("WAIT_F", "WAIT_B"):
                wait = (t0, t1)
                continue
            if kind in ("F", "B"):
                (fwd if kind == "F" else bwd)[s].append(t1 - t0)
                if compute_end is not None:
                    waited_s = wait[1] - wait[0] if wait is not None else 0.0
                    host[s].append(max(0.0, t0 - compute_end - waited_s))
                compute_end = t1
                nth = seen[(kind, mb)]
                seen[(kind, mb)] += 1
                src = s - 1 if kind == "F" else s + 1
                if 0 <= src < P:
                    sent = posts.get((d, src, "SEND_" + kind, int(mb)), [])
                    got = posts.get((d, s, "RECV_" + kind, int(mb)), [])
                    if nth < len(sent) and nth < len(got):
                        posted = max(sent[nth], got[nth])
                        # the transfer starts once both ends posted and the link delivered the
                        # previous message: queueing is the event simulation's, not the sample's
                        start = max(posted, link_free.get(kind, posted))
                        if wait is not None:  # the runtime's own wait: blocked, and until when
                            waited, arrived = wait[1] - wait[0] > min_wait_s, wait[1]
                        else:  # older logs: the gap before the compute
                            waited, arrived = prev_end is not None and t0 - prev_end > min_wait_s, t0
                        if waited and start <= arrived:
                            transfers[(src, s)].append(arrived - start)
                            messages[(src, s)].append(arrived - start)
                        elif not waited:
                            messages[(src, s)].append(None)
                        # arrival: when the wait ended if it blocked, else known only to be >= posted
                        link_free[kind] = arrived if waited else min(posted, arrived)
            wait = None
            prev_end = None if kind == "REDUCE" else t1
            if kind == "REDUCE":
                compute_end = None
    return Profile(
        dict(transfers),
        [median(fwd[s]) if fwd[s] else 0.0 for s in range(P)],
        [median(bwd[s]) if bwd[s] else 0.0 for s in range(P)],
        [median(host[s]) if host[s] else 0.0 for s in range(P)],
        dict(messages),
    )


def gantt(records: Mapping[int, Mapping[str, Any]]) -> list[tuple[int, int, str, int, float, float]]:
    """(replica, stage, F|B, micro-batch, start, end) of every compute, from the run's start."""
    t_min = min(float(rec["steps"][0][1]) for rec in records.values())
    rows = [
        (int(rec["replica"]), int(rec["stage"]), str(kind), int(mb), t0 - t_min, t1 - t_min)
        for rec in records.values()
        for kind, mb, t0, t1 in rec["events"]
        if kind in ("F", "B")
    ]
    return sorted(rows, key=lambda row: (row[0], row[1], row[4]))
