"""Benchmark: how reproducible are measured runtimes? Test-retest agreement on the emulated cluster.

``datasets/retest/<domain>/`` holds a second collection of the first strategies of a domain (the
same sampler and seed draw the same strategies), measured at another time. For every strategy
measured in both, this prints how often the two collections order a pair the same way (pairwise
agreement, the same statistic as a simulator's pairwise accuracy), Kendall tau, and the median
|log ratio| of the two medians (a uniform drift between collections shows up here, not in the
ordering). A simulator scored against one collection cannot be expected to order pairs much
more consistently than the other collection does, so this is the ceiling to read
``simulator_accuracy.py`` against; the bootstrap "noise" row there only re-draws iterations
within one trial and misses trial-to-trial variation.

Drift. "median log ratio" is signed (retest over collection: -0.15 = the retest ran 15 % faster
throughout). Where both runs measured a drift reference (``strategist collect --reference-every``),
"reference log ratio" is the log ratio of the two runs' median reference times and "after" the
trials' median log ratio less it: near 0 when the reference tracked the runs' common drift.

    python benchmarks/measurement_repeatability.py [--runtimes-dir D] [--retest-dir R]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from simulator import zoo
from simulator.learned.noise import matched_times
from simulator.learned.runtimes import default_runtimes_dir, domain_folders, load_domain
from simulator.metrics import pairwise_accuracy, resolved_pairs
from simulator.spec.records import reference_times

#: Pairs closer than this (relative) are below the trial-to-trial noise of a quiet domain.
GAP = 0.05


def _signed(x: float, width: int) -> str:
    return f"{x:+{width}.3f}" if np.isfinite(x) else f"{'n/a':>{width}s}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runtimes-dir", type=Path, default=None)
    p.add_argument("--retest-dir", type=Path, default=zoo.datasets_dir() / "retest")
    args = p.parse_args()
    main_folders = {f.name: f for f in domain_folders(args.runtimes_dir or default_runtimes_dir())}
    print(
        f"{'domain':18s} {'matched':>7s} {'pairwise agreement':>19s} {'kendall tau':>12s} {'median |log ratio|':>19s}"
        f" {'agreement, pairs >5% apart':>27s} {'share of pairs >5% apart':>25s}"
        f" {'median log ratio':>17s} {'reference log ratio':>20s} {'after':>6s}"
    )
    for retest in domain_folders(args.retest_dir):
        if retest.name not in main_folders:
            print(f"{retest.name:18s} no domain of that name in the runtimes folder")
            continue
        a, _ = load_domain(main_folders[retest.name])
        b, _ = load_domain(retest)
        x, y = matched_times(a, b)
        if len(x) < 3:
            print(f"{retest.name:18s} {len(x):7d} too few strategies measured in both")
            continue
        drift = float(np.median(np.log(y / x)))
        ref_a, ref_b = (
            [t for f in folder.files for t in reference_times(f)]
            for folder in (main_folders[retest.name], retest)
        )
        ref = float(np.log(np.median(ref_b) / np.median(ref_a))) if ref_a and ref_b else float("nan")
        print(
            f"{retest.name:18s} {len(x):7d} {pairwise_accuracy(y, x):19.3f} "
            f"{kendalltau(x, y).statistic:12.3f} {np.median(np.abs(np.log(x / y))):19.3f}"
            f" {pairwise_accuracy(y, x, min_gap=GAP):27.3f} {resolved_pairs(x, GAP):25.2f}"
            f" {drift:+17.3f} {_signed(ref, 20)} {_signed(drift - ref, 6)}"
        )


if __name__ == "__main__":
    main()
