"""Where time dilation stops helping: host CPU work that grows with the cluster's parallelism.

    python benchmarks/host_saturation.py sweep [--model NCF-sparse --cluster A2 --dilations 1,4,16]
    python benchmarks/host_saturation.py residuals [DOMAIN_DIR]   (default datasets/runtimes-v2/NCF-sparse__A2)

``sweep`` runs three baselines on loopback (LocalLauncher: every process of the cluster on this
host, links unshaped) at several dilations D and prints the *undilated* host time of an
iteration (measured iteration × D). A fixed per-call cost shows as host time that falls with D
(dilation amortises it); host work that a real cluster would spread over many machines shows as
host time that stays put. It also prints the probe's per-call costs (undilated) and the CPU
shares of the trial's own processes and of everything else.

``residuals`` reads a collected domain and prints, per number of PS servers a strategy uses, the
median measured/predicted ratio of the α-calibrated analytical model (the probe's per-call α of
the same records, as ``analytical_vs_measured.py``), with the trials' own CPU share.
runtime/testbed/README.md ("Host saturation") records what these printed on 2026-11-23.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from runtime.executor import ExecutorConfig, ExecutorSession
from runtime.executor.local import LocalLauncher
from simulator import zoo
from simulator.analytical import CostParams, FitSample, baseline, predict_samples
from simulator.spec import Strategy
from simulator.spec.records import load_trials


def sweep(model_name: str, cluster_name: str, dilations: list[float], scale: float) -> None:
    model, cluster = zoo.model(model_name), zoo.cluster(cluster_name)
    print(f"{model_name} on {cluster_name}, loopback, scale {scale}: undilated host ms per iteration")
    print(f"{'D':>5} {'strategy':12s} {'host ms':>8} {'probe ms (undilated)':40s} {'own':>5} {'foreign':>7}")
    for d in dilations:
        cfg = ExecutorConfig(scale=scale, dilation=d, warmup=2, iterations=6, probe_repeats=5)
        with ExecutorSession(model, cluster, LocalLauncher(), cfg) as s:
            for name in ("ps", "ps-naive", "horovod"):
                m = s.run(baseline(name, model, cluster))
                if not m.ok:
                    print(f"{d:5.0f} {name:12s} failed: {m.failure}")
                    continue
                env = m.environment
                probe = {k: round(v * 1e3 * d, 1) for k, v in env.get("per_call_overhead_s", {}).items()}
                host = statistics.median(m.iteration_times) * 1e3 * d
                print(
                    f"{d:5.0f} {name:12s} {host:8.1f} {probe!s:40s} "
                    f"{env.get('own_cpu_share', float('nan')):5.2f} {env.get('foreign_cpu_share', float('nan')):7.2f}",
                    flush=True,
                )


def residuals(domain: Path) -> None:
    ok = [r for r in load_trials(domain) if r["ok"]]
    model, cluster = zoo.model(ok[0]["model"]), zoo.cluster(ok[0]["cluster"])
    samples = [FitSample(model, cluster, Strategy.model_validate(r["strategy"]), r["median_s"]) for r in ok]
    probes = [r.get("per_call_overhead_s") or {} for r in ok]

    def med(kind: str) -> float | None:
        vals = [p[kind] for p in probes if kind in p]
        return float(np.median(vals)) if vals else None

    params = CostParams(
        call_overhead_s=med("collective"), ps_round_s=med("ps_round"), allgather_call_s=med("allgather")
    )
    ratio = np.array([s.seconds for s in samples]) / predict_samples(samples, params)
    own = np.array([r["measurement"]["environment"].get("own_cpu_share", np.nan) for r in ok])
    servers = np.array(
        [
            len({sh.server for vs in s.strategy.variables for sh in vs.shards if sh.kind == "ps"})
            for s in samples
        ]
    )
    print(
        f"{domain.name}: {len(ok)} trials, α = {params.call_overhead_s}, ps {params.ps_round_s}, ag {params.allgather_call_s}"
    )
    print(f"{'PS servers':>10} {'trials':>6} {'median measured/predicted':>26} {'own CPU share':>14}")
    for k in sorted(set(servers.tolist())):
        sel = servers == k
        own_k = float(np.nanmedian(own[sel])) if np.isfinite(own[sel]).any() else float("nan")
        print(f"{k:10d} {int(sel.sum()):6d} {float(np.median(ratio[sel])):26.2f} {own_k:14.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sw = sub.add_parser("sweep")
    sw.add_argument("--model", default="NCF-sparse")
    sw.add_argument("--cluster", default="A2")
    sw.add_argument("--dilations", default="1,4,16")
    sw.add_argument("--scale", type=float, default=37.5)
    rs = sub.add_parser("residuals")
    rs.add_argument(
        "domain", nargs="?", type=Path, default=zoo.datasets_dir() / "runtimes-v2" / "NCF-sparse__A2"
    )
    args = ap.parse_args()
    if args.cmd == "sweep":
        sweep(args.model, args.cluster, [float(x) for x in args.dilations.split(",")], args.scale)
    else:
        residuals(args.domain)


if __name__ == "__main__":
    main()
