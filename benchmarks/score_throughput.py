"""Strategies scored per second by the analytical model: vectorised paths and the reference loop.

Run: python benchmarks/score_throughput.py [--distinct 200] [--tile 20] [--repeat 5] [--cpu 0]

Pins itself to one CPU core and times with CPU time (time.process_time), so that other processes
sharing the machine slow the figures less than wall-clock timing would; each figure is the best
of ``--repeat`` runs. Strategies are the tests' random generator's (about 40% of variables
partitioned into up to 4 shards, half PS half collective: heavier than a typical sampler draw);
``--distinct`` strategies are generated and tiled ``--tile`` times into one batch. Columns:
    score        vectorised Eq. 1-3 over a prepared StrategyBatch (the search's inner loop)
    arrays+score make_batch from per-row choice arrays (what a numpy sampler hands over) + score
    encode+score encode from Strategy objects + score
    reference    the plain per-shard Python loop (simulator.analytical.reference)
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

from simulator import zoo
from simulator.analytical import CostParams, cluster_arrays, encode, make_batch, model_arrays, score
from simulator.analytical.batch import CHOICE_FIELDS
from simulator.analytical.reference import reference_cost
from simulator.analytical.testing import random_strategies

PAIRS = (("BERT-large", "B7"), ("NCF-sparse", "A2"))


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """The fastest of ``repeat`` runs, CPU seconds of this process."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def measure(
    model_name: str, cluster_name: str, distinct: int, tile: int, repeat: int, params: CostParams
) -> list[str]:
    """One table row: strategies per CPU second on each path."""
    model, cluster = zoo.model(model_name), zoo.cluster(cluster_name)
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    strategies = random_strategies(model, cluster, distinct, seed=0)
    small = encode(ma, ca, strategies)
    n = distinct * tile
    choices = {k: np.tile(getattr(small, k), tile) for k in CHOICE_FIELDS}
    choices["strategy"] += np.repeat(np.arange(tile) * distinct, small.rows)
    batch = make_batch(ma, ca, **choices)
    some = strategies[: min(50, len(strategies))]
    t_score = best_of(repeat, lambda: score(ma, ca, batch, params))
    t_arrays = best_of(repeat, lambda: score(ma, ca, make_batch(ma, ca, **choices), params))
    t_encode = best_of(repeat, lambda: score(ma, ca, encode(ma, ca, some), params))
    t_ref = best_of(2, lambda: [reference_cost(model, cluster, x, params) for x in some])
    return [
        model_name,
        cluster_name,
        str(n),
        f"{small.rows / distinct:.0f}",
        f"{n / t_score:,.0f}",
        f"{n / t_arrays:,.0f}",
        f"{len(some) / t_encode:,.0f}",
        f"{len(some) / t_ref:,.0f}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--distinct", type=int, default=200)
    ap.add_argument("--tile", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=None, help="core to pin to (default: the first allowed)")
    args = ap.parse_args()
    cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    params = CostParams()
    table = Table(
        "model",
        "cluster",
        "batch",
        "shards/strategy",
        "score /s",
        "arrays+score /s",
        "encode+score /s",
        "reference /s",
        title=f"Analytical scoring throughput (strategies per second, one core: cpu {cpu})",
    )
    for model_name, cluster_name in PAIRS:
        table.add_row(*measure(model_name, cluster_name, args.distinct, args.tile, args.repeat, params))
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
