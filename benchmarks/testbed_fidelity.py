"""Does the emulated cluster's sync time behave like a cluster's? Per-call overhead and bandwidth share.

``python benchmarks/testbed_fidelity.py [--domains BERT-3L__B5,NCF-sparse__A2] [--dilation auto|D]
[--repeats 3]`` (root: network namespaces) prints, per domain, measured on the testbed with the
collection's protocol (``runtime.testbed.dilated_scales``, 3 warm-up + 10 timed iterations, a
barrier before each):

- **per-call overhead**: the probe's 1-element all-reduce and 1-element PS round on the trial's own
  processes (``runtime/executor/probe.py``), divided by D; next to it the raw (undilated) cost.
  Target: <= 2 ms (a real TCP cluster: ~0.05-1 ms).
- **bandwidth share of Horovod's sync**: the Horovod baseline's synchronisation measured at the
  cluster's link rates (s1) and with every link's rate doubled (s2), bytes unchanged. If
  sync = fixed + bandwidth, then bandwidth = 2 (s1 - s2) and its share is 2 (s1 - s2) / s1.
  Target: >= 60 %.
- **rate-doubling ratio of single-server PS** (``ps-naive``): s2 / s1. Time that scales with
  bandwidth halves (0.5); per-call cost does not move (1.0). Target: <= 0.65.

What is measured as "sync": the iteration time minus the compute time, i.e. the synchronisation
left after backward. To see sync in isolation (no overlap hides part of it, and the share is not
a ratio of two small numbers), these runs use a per-GPU batch of 1, which shrinks the replayed
compute ~batch-fold and leaves every byte as it is. Each configuration is measured ``--repeats``
times, alternating x1 and x2 sessions so host drift hits both; the median of the repeats is
used and the interval is the min-max over repeats.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from runtime.executor import ExecutorConfig, ExecutorSession
from runtime.testbed import Testbed, dilated_scales
from simulator import zoo
from simulator.analytical import baseline
from simulator.spec import ClusterSpec, ModelSpec, split_domain
from simulator.spec.measurement import Measurement

DEFAULT_DOMAINS = "BERT-3L__B5,NCF-sparse__A2,BERT-3L__A2,ResNet50__B1"
STRATEGIES = ("horovod", "ps-naive")


@dataclass
class Run:
    sync: dict[str, float]  # strategy -> median exposed sync, seconds
    overhead: dict[str, float]  # probe kind -> seconds (dilated)
    foreign: float


def measure(model: ModelSpec, cluster: ClusterSpec, cfg: ExecutorConfig, rate_factor: float) -> Run:
    """One session with every link ``rate_factor`` times faster; both strategies measured."""
    sync: dict[str, float] = {}
    overhead: dict[str, list[float]] = {}
    foreign: list[float] = []
    with (
        Testbed(cluster, cfg.link_scale / rate_factor) as bed,
        ExecutorSession(model, cluster, bed, cfg) as s,
    ):
        for name in STRATEGIES:
            m: Measurement = s.run(baseline(name, model, cluster))
            if not m.ok:
                raise RuntimeError(f"{name} on {cluster.name}: {m.failure}")
            exposed = [t - c for t, c in zip(m.iteration_times, m.compute_times, strict=True)]
            sync[name] = statistics.median(exposed)
            for kind, v in m.environment.get("per_call_overhead_s", {}).items():
                overhead.setdefault(kind, []).append(v)
            foreign.append(m.environment.get("foreign_cpu_share", float("nan")))
    return Run(sync, {k: statistics.median(v) for k, v in overhead.items()}, max(foreign))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--domains", default=DEFAULT_DOMAINS)
    ap.add_argument("--dilation", default="auto")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for domain in args.domains.split(","):
        model_name, cluster_name = split_domain(domain)
        model, cluster = zoo.model(model_name), zoo.cluster(cluster_name)
        scale, d = dilated_scales(cluster, None if args.dilation == "auto" else float(args.dilation))
        cfg = ExecutorConfig(scale=scale, dilation=d, warmup=3, iterations=10, batch_size=1, timeout_s=900,
                             startup_timeout_s=600)  # fmt: skip
        runs: dict[float, list[Run]] = {1.0: [], 2.0: []}
        for _ in range(args.repeats):
            for rf in (1.0, 2.0):
                runs[rf].append(measure(model, cluster, cfg, rf))

        def med(rf: float, name: str, runs: dict[float, list[Run]] = runs) -> float:
            return statistics.median(r.sync[name] for r in runs[rf])

        shares = [
            2 * (a.sync["horovod"] - b.sync["horovod"]) / a.sync["horovod"]
            for a, b in zip(runs[1.0], runs[2.0], strict=True)
        ]
        ratios = [b.sync["ps-naive"] / a.sync["ps-naive"] for a, b in zip(runs[1.0], runs[2.0], strict=True)]
        coll = statistics.median(
            r.overhead.get("collective", float("nan")) for rs in runs.values() for r in rs
        )
        psr = statistics.median(r.overhead.get("ps_round", float("nan")) for rs in runs.values() for r in rs)
        foreign = max(r.foreign for rs in runs.values() for r in rs)
        rows.append((domain, d, coll, psr, med(1.0, "horovod"), statistics.median(shares), min(shares),
                     max(shares), med(1.0, "ps-naive"), statistics.median(ratios), min(ratios), max(ratios),
                     foreign))  # fmt: skip
        print(_row(rows[-1]), flush=True)
    print()
    print("| domain | D | per-call coll ms (raw) | per-call PS ms (raw) | horovod sync ms | bandwidth share (min-max) "
          "| ps-naive sync ms | x2-rate ratio (min-max) | max foreign CPU |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(_row(r))


def _row(r: tuple) -> str:  # type: ignore[type-arg]
    domain, d, coll, psr, hs, share, slo, shi, ps, ratio, rlo, rhi, foreign = r
    return (
        f"| {domain} | {d:g} | {coll * 1e3:.2f} ({coll * d * 1e3:.1f}) | {psr * 1e3:.2f} ({psr * d * 1e3:.1f}) "
        f"| {hs * 1e3:.1f} | {share:.0%} ({slo:.0%}-{shi:.0%}) | {ps * 1e3:.1f} | {ratio:.2f} ({rlo:.2f}-{rhi:.2f}) "
        f"| {foreign:.2f} |"
    )


if __name__ == "__main__":
    main()
