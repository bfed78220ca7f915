"""The per-call overhead probe: what one collective call and one PS round cost on these processes.

Run by every rank of a session before every trial (``ExecutorConfig.probe_repeats`` times each),
on the same processes, groups and links as the trial itself, so each runtime record carries the
fixed per-call cost of *that* run: gloo's and Python's software path, the wake-ups of processes
sharing the host's cores, and the shaped links' per-packet latency. A real TCP/NCCL cluster
spends ~10 µs to ~1 ms there; the emulated one must be dilated until it is in that range
(runtime/testbed/README.md, "Time dilation").

- ``collective``: a 1-element all-reduce over the workers' group (the collectives' backend).
- ``allgather``: a 1-element all-gather over the workers' group. Gloo's all-gather costs several
  all-reduces' worth of software time on a crowded host (11 processes on 2 cores: ~18-23 ms raw
  against ~2-7 ms for a 1-element all-reduce; runtime/executor/README.md), and the executor sends a sparse unit as three of them, so the cost model needs this α too.
- ``ps_round``: every worker pushes 1 element to the PS server of the *last* node (so that, on a
  multi-node cluster, the round crosses the network) and waits for its 1-element answer; the
  server answers once it has every push. Gloo point-to-point on the PS groups, as the trial's.
- ``collective_unit``: the same 1-element all-reduce, but issued the way the trial issues a unit:
  handed to a sync channel's thread (``engine.Channel``), flattened, all-reduced, averaged, and
  waited for by the main thread. Its excess over ``collective`` is the executor's own per-unit
  path (a thread hand-off and wake-up on a crowded host, tensor bookkeeping), which the 1-element
  call alone misses: residuals of the v2 records put it at ~0.4-1.7 ms (dilated) per unit
  (runtime/testbed/README.md, "Host saturation"). The cost model's α is this figure where a
  record has it (``CostParams.from_probe``).
- ``ps_unit``: the PS round issued through the push and pull channels, as a PS unit is.

Every repetition starts after a barrier of all ranks; a repetition's time is the latest finish
minus the latest start over the workers (the convention of ``results.aggregate``). Timestamps are
returned raw (monotonic seconds) and reduced by the driver.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from runtime.executor.engine import Channel
from runtime.executor.groups import CommGroups

#: Message tag of the probe's PS round (far above the trial's ``unit.id * 8 + k`` tags).
PROBE_TAG = 1 << 20

#: What the probe measures, in the order it runs them (``results.aggregate`` reduces each).
PROBE_KINDS = ("collective", "allgather", "ps_round", "collective_unit", "ps_unit")

Stamps = list[tuple[float, float]]


def timed_calls(repeats: int, call: Callable[[], bool]) -> Stamps:
    """``repeats`` times: a barrier of all ranks, then ``call()``; its (start, end) stamps where it
    returned True (this rank's time counts). Shared with the pipeline runner's probe."""
    out: Stamps = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.monotonic()
        if call():
            out.append((t0, time.monotonic()))
    return out


def run_probe(g: CommGroups, repeats: int) -> dict[str, Stamps]:
    """Run the probe on this rank; returns this rank's (start, end) stamps per kind (workers)."""
    lay = g.layout
    server = lay.server_rank(lay.num_nodes - 1)
    is_worker = lay.is_worker(g.rank)
    one = torch.zeros(1, device=g.device)

    def collective() -> bool:
        if is_worker:
            dist.all_reduce(one, group=g.workers)
            if g.device.type == "cuda":
                torch.cuda.synchronize(g.device)
        return is_worker

    gathered = [torch.zeros(1, device=g.device) for _ in range(lay.num_workers)]

    def allgather() -> bool:
        if is_worker:
            dist.all_gather(gathered, one, group=g.workers)
            if g.device.type == "cuda":
                torch.cuda.synchronize(g.device)
        return is_worker

    def ps_exchange() -> None:
        buf = torch.zeros(1)
        send = dist.isend(buf, server, tag=PROBE_TAG, group=g.ps_push)
        answer = torch.empty(1)
        recv = dist.irecv(answer, server, tag=PROBE_TAG, group=g.ps_pull)
        for work in (send, recv):
            if work is not None:
                work.wait()

    def ps_round() -> bool:
        if is_worker:
            ps_exchange()
        elif g.rank == server:
            bufs = [torch.empty(1) for _ in range(lay.num_workers)]
            works = [dist.irecv(b, w, tag=PROBE_TAG, group=g.ps_push) for w, b in enumerate(bufs)]
            for work in works:
                if work is not None:
                    work.wait()
            total = torch.stack(bufs).sum(0)
            sends = [dist.isend(total, w, tag=PROBE_TAG, group=g.ps_pull) for w in range(lay.num_workers)]
            for work in sends:
                if work is not None:
                    work.wait()
        return is_worker

    def as_unit(channel: Channel, fn: Callable[[], None]) -> None:
        channel.submit(fn)
        channel.drain()

    def unit_allreduce() -> None:
        flat = torch.cat([one])
        dist.all_reduce(flat, group=g.workers)
        flat.float().div_(lay.num_workers)
        if g.device.type == "cuda":
            torch.cuda.synchronize(g.device)

    channel = Channel("probe-unit")
    try:

        def collective_unit() -> bool:
            if is_worker:
                as_unit(channel, unit_allreduce)
            return is_worker

        def ps_unit() -> bool:
            if is_worker:
                as_unit(channel, ps_exchange)
                return True
            return ps_round()

        return {
            "collective": timed_calls(repeats, collective),
            "allgather": timed_calls(repeats, allgather),
            "ps_round": timed_calls(repeats, ps_round),
            "collective_unit": timed_calls(repeats, collective_unit),
            "ps_unit": timed_calls(repeats, ps_unit),
        }
    finally:
        channel.close()


def call_seconds(per_worker: list[Stamps]) -> list[float]:
    """Per repetition: the latest end minus the latest start over the workers."""
    if not per_worker or not per_worker[0]:
        return []
    n = len(per_worker[0])
    return [max(s[k][1] for s in per_worker) - max(s[k][0] for s in per_worker) for k in range(n)]
