"""A full AutoSync round, array path against object path: strategies per CPU-second per stage.

Run: python benchmarks/round_throughput.py [--model BERT-large] [--cluster B7] [--samples 10000]
         [--k 8] [--seed 0] [--cpu N] [--skip-objects]

One round of ``search.round.run_round`` with ``search.round.DEFAULTS``: M samples under c_lb + c_am
and the memory check, scored by the analytical model, the qualified fraction kept, K chosen by
Eq. 11 (factor similarity). Both paths run on the same seed in one process pinned to one core,
timed with CPU time (time.process_time), so other processes on the machine slow the figures less
than wall-clock timing would (they still share caches and memory bandwidth). Stages:

    sample       arrays: ArraySampler draws + memory check on arrays (ChoiceArrays)
                 objects: the same draws decoded into Strategy objects + MemoryModel.check each
    pool         duplicates and already-tried strategies dropped (content hashes / strategy_key)
    score        arrays: the vectorised Eq. 1-3 on StrategyBatch chunks of the pool
                 objects: Simulator.predict on the Strategy objects (encode + the same scorer)
    select       qualified fraction + Eq. 11 (arrays: factor codes from the arrays; objects:
                 FactorSimilarity.embed on Strategy objects), then the K chosen as objects

Warm-up: one round of 64 samples runs first, in the same process, so the figures are warm: the
array sampler's compiled loops (``search.samplers.kernels``, numba) are loaded from numba's disk
cache or compiled there, and the space's tables are built. Its CPU time is printed as the one-off
cost ("first round"): with an empty cache (e.g. ``NUMBA_CACHE_DIR=$(mktemp -d)``) it includes
compiling the kernels; with the cache filled by an earlier run, only loading them. numba's import
is timed on its own, before the warm-up (the kernels import it on first use).

Each column is M / CPU seconds of that stage; "end to end" is M / the round's CPU total ("round
s"); "wall s" is the round's wall-clock time (longer than CPU time when other processes share the
core). The host's load average is printed with the figures. The last line says whether both paths
chose the same K strategies (the same positions and the same content).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Literal

from rich.console import Console
from rich.table import Table

from search.round import DEFAULTS, RoundResult, run_round
from simulator import zoo
from simulator.analytical import AnalyticalSimulator
from simulator.spec import strategy_key


def stages(r: RoundResult) -> dict[str, float]:
    t = dict(r.timings)
    t["select"] = t.get("select", 0.0) + t.pop("materialise", 0.0)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="BERT-large")
    ap.add_argument("--cluster", default="B7")
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu", type=int, default=None, help="core to pin to (default: the first allowed)")
    ap.add_argument("--skip-objects", action="store_true", help="run the array path only")
    args = ap.parse_args()
    numba_import = time.process_time()
    import numba  # the array sampler's kernels import it on first use: timed here, on its own

    numba_import = time.process_time() - numba_import
    cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    model, cluster = zoo.model(args.model), zoo.cluster(args.cluster)
    sim = AnalyticalSimulator()
    first = time.process_time()
    run_round(model, cluster, sim, samples=64, k=args.k, seed=args.seed + 1)  # warm the caches
    first = time.process_time() - first
    results: dict[str, RoundResult] = {}
    paths: tuple[Literal["arrays", "objects"], ...] = (
        ("arrays",) if args.skip_objects else ("arrays", "objects")
    )
    wall: dict[str, float] = {}
    for path in paths:
        start, start_wall = time.process_time(), time.perf_counter()
        results[path] = run_round(
            model, cluster, sim, samples=args.samples, k=args.k, seed=args.seed, path=path
        )
        results[path].timings["total"] = time.process_time() - start
        wall[path] = time.perf_counter() - start_wall
    table = Table(
        "path",
        "sample /s",
        "pool /s",
        "score /s",
        "select /s",
        "end to end /s",
        "round s",
        "wall s",
        title=(
            f"One round: M = {args.samples:,} samples, K = {args.k}, {args.model} on {args.cluster}, "
            f"alpha {DEFAULTS.alpha}, qualified {DEFAULTS.qualified_fraction}, {DEFAULTS.similarity} "
            f"similarity (strategies per CPU second, one core: cpu {cpu})"
        ),
    )
    for name, r in results.items():
        t = stages(r)
        total = t["total"]
        table.add_row(
            name,
            *(
                f"{args.samples / t[s]:,.0f}" if t[s] > 0 else "-"
                for s in ("sample", "pool", "score", "select")
            ),
            f"{args.samples / total:,.0f}",
            f"{total:.2f}",
            f"{wall[name]:.2f}",
        )
    console = Console(width=160)
    console.print(table)
    a = results["arrays"]
    load = os.getloadavg()
    console.print(
        f"host load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) on "
        f"{os.cpu_count()} cores; 'round s' is CPU time of this process, 'wall s' wall-clock time"
    )
    console.print(
        f"one-off costs: numba {numba.__version__} import {numba_import:.2f} s CPU; first round "
        f"(64 samples: kernels compiled or loaded from numba's cache, tables built) {first:.2f} s CPU"
    )
    console.print(
        f"pool {a.pool:,} after duplicates, qualified {a.qualified:,}; chosen predicted "
        f"{min(a.predicted) * 1e3:.2f}-{max(a.predicted) * 1e3:.2f} ms; peak RSS "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
    )
    if "objects" in results:
        o = results["objects"]
        same = a.indices == o.indices and [strategy_key(s) for s in a.strategies] == [
            strategy_key(s) for s in o.strategies
        ]
        console.print(f"same chosen set on both paths: {'yes' if same else 'NO'} (indices {list(a.indices)})")


if __name__ == "__main__":
    main()
