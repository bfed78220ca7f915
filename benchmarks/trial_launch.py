"""Per-trial overhead of the agents' torchrun path against the executor's session path (issue 41).

Same model (the executor's tiny reference model), same 2x2 cluster on loopback, same strategies,
real compute, interleaved repeats. Overhead of a trial = its wall time minus the time its measured
iterations took (``environment.iterations_s``). torchrun path: one fresh ``torchrun`` per node per
trial (as an agent runs it, without the API); session path: ``ExecutorSession.run_detailed`` on a
session kept up across trials (its one start-up is reported separately). Also measured: a bare
``python -c 'import torch'`` (the floor of any fresh process). Median and a 95 % bootstrap interval.

    python benchmarks/trial_launch.py --repeats 5 --out /tmp/trial_launch.jsonl   # resumable
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.agent.rank_main import nproc
from runtime.agent.torchrun import NodeLaunch, start, stop
from runtime.executor import ExecutorConfig, ExecutorSession, LocalLauncher
from runtime.executor.layout import RankLayout
from runtime.executor.reference import correctness_cases, tiny_model, two_by_two
from runtime.executor.results import aggregate
from simulator.spec import Strategy


def torchrun_trial(cfg: ExecutorConfig, strategy: Strategy, trial: int, port: int) -> tuple[float, float]:
    """(wall s, iterations s) of one trial run by two fresh torchruns on loopback."""
    model, cluster = tiny_model(), two_by_two()
    work = Path(tempfile.mkdtemp(prefix="trial-launch-"))
    job = {"model": model.model_dump(mode="json"), "cluster": cluster.model_dump(mode="json"),
           "config": json.loads(cfg.to_json()), "strategy": json.loads(strategy.model_dump_json()),
           "trial": trial, "result": str(work / "result.json")}  # fmt: skip
    (work / "job.json").write_text(json.dumps(job))
    layout = RankLayout(cluster)
    t0 = time.monotonic()
    procs = [start(NodeLaunch(2, nproc(layout, r), r, f"127.0.0.1:{port}", f"bench-{trial}", "127.0.0.1",
                              work / "job.json", 60), work / f"n{r}.log") for r in (0, 1)]  # fmt: skip
    codes = [p.wait(timeout=300) for p in procs]
    wall = time.monotonic() - t0
    for p in procs:
        stop(p)
    if codes != [0, 0]:
        raise RuntimeError(f"torchrun failed {codes}: {(work / 'n0.log').read_text()[-800:]}")
    ranks = json.loads((work / "result.json").read_text())["ranks"]
    m = aggregate(ranks, cfg, {})
    return wall, float(m.environment["iterations_s"])


def import_torch_s() -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.monotonic() - t0


def ci95(xs: list[float], rng: random.Random) -> tuple[float, float, float]:
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(2000))
    return statistics.median(xs), meds[50], meds[1949]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("trial_launch.jsonl"))
    args = ap.parse_args()
    cfg = ExecutorConfig(compute="real", warmup=1, iterations=args.iterations, timeout_s=120)
    cases = correctness_cases(tiny_model(), "n0", "n1")
    names = [n for n, (_, c) in cases.items() if c == "sgd"][:2]
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    with (
        ExecutorSession(tiny_model(), two_by_two(), LocalLauncher(), cfg) as session,
        args.out.open("a") as out,
    ):
        for rep in range(args.repeats):
            for i, name in enumerate(names):
                key = f"{rep}-{name}"
                if any(d["key"] == key for d in done):
                    continue
                strategy = cases[name][0]
                r = session.run_detailed(strategy)
                if r.measurement.failure:
                    raise RuntimeError(r.measurement.failure)
                s_over = r.wall_s - float(r.measurement.environment["iterations_s"])
                wall, its = torchrun_trial(cfg, strategy, rep * 10 + i, 29600 + (rep * 10 + i) % 200)
                row = {"key": key, "strategy": name, "session_overhead_s": s_over, "torchrun_overhead_s": wall - its,
                       "torchrun_wall_s": wall, "session_startup_s": session.startup_s,
                       "import_torch_s": import_torch_s()}  # fmt: skip
                out.write(json.dumps(row) + "\n")
                out.flush()
                done.append(row)
                print(row, flush=True)
    rng = random.Random(0)
    for field in ("session_overhead_s", "torchrun_overhead_s", "import_torch_s", "session_startup_s"):
        med, lo, hi = ci95([d[field] for d in done], rng)
        print(f"{field:22s} median {med:.3f} s  95% CI [{lo:.3f}, {hi:.3f}]  (n={len(done)})")


if __name__ == "__main__":
    main()
