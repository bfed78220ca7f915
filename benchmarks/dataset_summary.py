"""One line per collected domain: trials, dilation, times, host load, when and at which commits.

    python benchmarks/dataset_summary.py [DATASET_DIR]   (default datasets/runtimes-v2)

Prints the markdown table datasets/README.md shows for the re-collected domains, read from the
records themselves (nothing is typed by hand).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from simulator import zoo
from simulator.spec.records import load_trials


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else zoo.datasets_dir() / "runtimes-v2"
    print(
        "| domain | trials (ok) | D | median s/iter (min-max) | median foreign CPU share | noisy "
        "| measured (UTC) | commits |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for d in sorted(p for p in root.iterdir() if p.is_dir() and "__" in p.name):
        recs = list(load_trials(d))
        if not recs:
            continue
        ok = [r["median_s"] for r in recs if r["ok"]]
        times = sorted(r["environment"]["time_utc"] for r in recs)
        commits = sorted({r["environment"]["git_commit"][:7] for r in recs})
        dil = sorted({r["dilation"] for r in recs})
        foreign = statistics.median(r["foreign_cpu_share"] for r in recs)
        span = f"{times[0][:10]} {times[0][11:16]}-{times[-1][11:16]}"
        rng = f"{statistics.median(ok):.3f} ({min(ok):.3f}-{max(ok):.3f})" if ok else "-"
        print(
            f"| {d.name} | {len(recs)} ({len(ok)}) | {'/'.join(f'{x:g}' for x in dil)} | {rng} | {foreign:.2f} "
            f"| {sum(bool(r['noisy']) for r in recs)} | {span} | {', '.join(commits)} |"
        )


if __name__ == "__main__":
    main()
