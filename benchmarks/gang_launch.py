"""Launch overhead of a gang: ``runtime.launch.Gang`` (one process per rank) against one torchrun
per node (c10d rendezvous, ``runtime.agent.torchrun.torchrun_prefix``), for the same ranks.

Every rank does what a trial's rank does before its first step and nothing else: import torch,
join a gloo process group through ``env://`` (MASTER_ADDR/PORT, RANK, WORLD_SIZE: set by the Gang
or by torchrun), one barrier, exit. Wall time from the first spawn to the last exit; the two paths
interleaved per repeat. Median and a 95 % bootstrap interval of the median.

    python benchmarks/gang_launch.py --nodes 2 --per-node 2 --repeats 7
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.agent.torchrun import NodeLaunch, stop, torchrun_prefix
from runtime.executor import LocalLauncher
from runtime.launch import Gang, free_port

HERE = Path(__file__).resolve()


def rank_main() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    dist.barrier()
    dist.destroy_process_group()


def gang_trial(nodes: int, per_node: int) -> float:
    t0 = time.monotonic()
    ranks = [n for n in range(nodes) for _ in range(per_node)]
    with Gang(LocalLauncher(), ranks, lambda r: [sys.executable, str(HERE), "--rank-main"]) as g:
        ended = g.wait(time.monotonic() + 300)
    if not ended.ok:
        raise RuntimeError(ended.reason)
    return time.monotonic() - t0


def torchrun_trial(nodes: int, per_node: int, trial: int, work: Path) -> float:
    port = free_port()
    t0 = time.monotonic()
    procs = []
    for r in range(nodes):
        n = NodeLaunch(nodes, per_node, r, f"127.0.0.1:{port}", f"gang-{trial}", "127.0.0.1", work, 60)
        argv = [*torchrun_prefix(n), str(HERE), "--rank-main"]
        procs.append(_start(argv, work / f"n{r}.log", n))
    codes = [p.wait(timeout=300) for p in procs]
    wall = time.monotonic() - t0
    for p in procs:
        stop(p)
    if any(codes):
        raise RuntimeError(f"torchrun exit codes {codes}: see {work}")
    return wall


def _start(argv: list[str], log: Path, n: NodeLaunch):  # type: ignore[no-untyped-def]
    import os
    import subprocess

    from runtime.agent import torchrun

    with log.open("wb") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"},
                                preexec_fn=torchrun._pdeathsig if sys.platform.startswith("linux") else None)  # fmt: skip


def ci(xs: list[float], reps: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(reps))
    return meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--per-node", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    if a.rank_main:
        rank_main()
        return
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="gang-launch-"))
    gang, tr = [], []
    for i in range(a.repeats):
        order = [0, 1] if i % 2 == 0 else [1, 0]
        for k in order:
            if k == 0:
                gang.append(gang_trial(a.nodes, a.per_node))
            else:
                tr.append(torchrun_trial(a.nodes, a.per_node, i, work))
        print(f"repeat {i}: gang {gang[-1]:.2f} s, torchrun {tr[-1]:.2f} s", flush=True)
    diff = [t - g for g, t in zip(gang, tr, strict=True)]
    for name, xs in (
        ("gang (one process per rank)", gang),
        ("torchrun per node", tr),
        ("torchrun - gang", diff),
    ):
        lo, hi = ci(xs)
        print(f"{name}: median {statistics.median(xs):.2f} s, 95% CI [{lo:.2f}, {hi:.2f}], n={len(xs)}")


if __name__ == "__main__":
    main()
