"""Network probes run inside a testbed's nodes: a gloo all-reduce and a PS-like push/pull.

``python -m runtime.testbed.probe PATTERN [PATTERN ...] --rank R --world N --master A --port P
--bytes B`` prints one JSON line from rank 0: per pattern, the median seconds per iteration. One
process group runs all patterns (starting the processes, i.e. importing torch, is the slow part).
Used by the fidelity tests and by ``runtime.testbed.fit``.

* ``allreduce``: every rank all-reduces a float32 tensor of ``bytes`` bytes.
* ``ps:S``: rank S is the server; every other rank pushes ``bytes`` of gradient to it (send) and
  pulls ``bytes`` of parameters back (recv), as a PS worker does each step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist


def _allreduce(buf: torch.Tensor) -> None:
    dist.all_reduce(buf)


def _wait(work: dist.Work | None) -> None:
    if work is not None:
        work.wait()


def _ps(buf: torch.Tensor, server: int) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    workers = [r for r in range(world) if r != server]
    if rank == server:
        grads = [torch.empty_like(buf) for _ in workers]
        reqs = [dist.irecv(g, src=r) for r, g in zip(workers, grads, strict=True)]
        for q in reqs:
            _wait(q)
        reqs = [dist.isend(buf, dst=r) for r in workers]
        for q in reqs:
            _wait(q)
    else:
        dist.send(buf, dst=server)
        dist.recv(buf, src=server)


def _measure(step: Callable[[], None], warmup: int, iters: int) -> list[float]:
    times = []
    for i in range(warmup + iters):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        dist.barrier()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("patterns", nargs="+", help="allreduce | ps:<server rank>")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bytes", type=int, default=4 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    a = p.parse_args(argv)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{a.master}:{a.port}",
        rank=a.rank,
        world_size=a.world,
        timeout=timedelta(seconds=60),
    )
    buf = torch.ones(max(1, a.bytes // 4), dtype=torch.float32)
    result: dict[str, object] = {"bytes": buf.numel() * 4}
    for pattern in a.patterns:
        if pattern == "allreduce":
            times = _measure(lambda: _allreduce(buf), a.warmup, a.iters)
        elif pattern.startswith("ps:"):
            server = int(pattern[3:])
            times = _measure(lambda s=server: _ps(buf, s), a.warmup, a.iters)  # type: ignore[misc]
        else:
            raise SystemExit(f"patterns: unknown pattern {pattern!r} (allreduce | ps:<rank>)")
        result[pattern] = {"median_s": statistics.median(times), "times_s": times}
    if a.rank == 0:
        print(json.dumps(result))
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
