"""HeterPS plans measured on the emulated cluster next to the cost model's prediction (issue 18, item 6).

Run:   python benchmarks/heterogeneous_measured.py [--models CTRDNN,2EMB,NCE] [--pool HeterPS-2GPU]
           [--limit 1e5] [--repeats 3] [--iterations 8] [--warmup 2] [--rl-seconds 5]
           [--max-groups 2] [--scale S] [--dilation D] [--extra 'MODEL:NAME=type:layers:units,...']

For every model: the RL scheduler's plan (``RLScheduler``, seed 0), the all-GPU plan
(``SingleTypeScheduler('gpu')``) and AIBox's plan (``AIBoxScheduler``), each with its own
provisioning, are run by ``runtime.heterogeneous.measure_plan`` (stages as unit-group processes on
shaped links, the embedding stage served by PS processes). Runs are interleaved: repeat r runs
every (model, plan) once before repeat r + 1 starts, so slow drifts of the shared host hit every
plan alike. Printed per plan: predicted throughput (Formula 6) and money (Formula 8); measured
throughput as the median over repeats with the 2.5-97.5 percentile range of all measured
iterations of the bottleneck stage ("95 % range"); measured money (Formula 8 with the measured
throughput); the ratio measured / predicted throughput; the measured bottleneck stage.

One factor at a time (``--factor``): for the (model, plan) pairs of ``--only`` (e.g.
``2EMB:aibox,NCE:aibox``), each repeat runs the plan as above and once with one factor changed:
``backward`` sends no gradients to the previous stage (is one direction of the boundary enough to
set the rate?); ``nic:<type>=<x>`` multiplies the NIC share of the resource types whose name
contains <type> by x in the emulation only (the cost model's prediction is kept from the original
cluster); ``local-tables`` flips ``--local-tables`` (a CPU stage's sparse lookups and pushes on
its compute side, where the cost model counts them, instead of on its communication thread);
``scale=<x>`` runs with x times the base run's byte scale (messages x times smaller, link rates
scaled alike: the same transfer times, but what the kernel's socket buffers absorb grows);
``queue=<KiB>`` sets the data links' tbf queue (the testbed's default is max(50 ms, 256 KiB));
``no-pace`` runs without the data sockets' pacing cap at their NIC's rate (``MeasureConfig.pace``,
on by default since 2026-11-25d); ``ack-priority`` lets pure TCP ACKs skip the data queued on a
shaped link (``MeasureConfig.ack_priority``);
``dilation=<x>`` runs with x times the dilation the base run chose (real time that is
not dilated, i.e. the host's per-call and serving overheads, then weighs x times less). The
one-factor table also gives every stage's median period, communication and, of it, the sparse
lookups and pushes (real-cluster ms per iteration). ``--extra`` adds fixed plans (e.g. the earlier 2EMB AIBox plan, 128 cores into one V100).

Targets (issue 18): every plan's measured throughput within +-20 % of the cost model; the RL plan
meets the throughput limit and costs less than AIBox's plan, measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from runtime.heterogeneous import HeterogeneousRun, MeasureConfig, measure_plan
from search.heterogeneous import AIBoxScheduler, RLConfig, RLScheduler, ScheduleResult, SingleTypeScheduler
from simulator import zoo
from simulator.analytical.heterogeneous import HeterogeneousCostModel, Workload
from simulator.spec import ClusterSpec, ResourcePlan


def plans(
    model: str, pool: str, limit: float, rl_seconds: float, extra: str = ""
) -> dict[str, ScheduleResult]:
    spec = zoo.model(model)
    cm = HeterogeneousCostModel(spec, zoo.cluster(pool), Workload(limit, batch_size=spec.batch_size))
    out = {
        "rl": RLScheduler(RLConfig(time_limit=rl_seconds), seed=0).schedule(cm),
        "all-gpu": SingleTypeScheduler("gpu").schedule(cm),
        "aibox": AIBoxScheduler().schedule(cm),
    }
    for item in filter(None, extra.split(";")):
        head, _, stages = item.partition("=")
        m, _, name = head.partition(":")
        if m == model:
            out[name] = fixed_plan(cm, name, stages)
    return {k: r for k, r in out.items() if r.plan is not None}


def fixed_plan(cm: HeterogeneousCostModel, name: str, stages: str) -> ScheduleResult:
    """A plan given as ``type:layers:units,...`` (type: a unique part of a resource type's name)."""
    assignment: list[str] = []
    units: list[int] = []
    for st in stages.split(","):
        part, layers, k = st.split(":")
        (tname,) = [t.name for t in cm.types if part in t.name]
        assignment += [tname] * int(layers)
        units.append(int(k))
    plan = ResourcePlan.from_assignment(assignment, units, model=cm.model.name, cluster=cm.cluster.name)
    r = cm.evaluate(plan)
    return ScheduleResult(name, plan, tuple(units), r.money, r.throughput, 0.0, 1)


def describe(r: ScheduleResult) -> str:
    assert r.plan is not None
    return ", ".join(
        f"{s.first_layer}-{s.last_layer - 1}:{s.resource_type.split('-')[-1]}x{s.units}"
        for s in r.plan.stages
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--models", default="CTRDNN,2EMB,NCE")
    ap.add_argument("--pool", default="HeterPS-2GPU")
    ap.add_argument("--limit", type=float, default=1e5, help="throughput limit, samples/s")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rl-seconds", type=float, default=5.0)
    ap.add_argument("--max-groups", type=int, default=2)
    ap.add_argument("--scale", type=float, default=None)
    ap.add_argument("--dilation", type=float, default=None)
    ap.add_argument("--loopback", action="store_true", help="unshaped loopback (logic check only)")
    ap.add_argument(
        "--local-tables",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="a CPU stage's sparse lookups and pushes run inside its compute replay (MeasureConfig.local_tables)",
    )
    ap.add_argument(
        "--factor",
        default="",
        help="'backward', 'local-tables', 'no-pace', 'ack-priority', 'nic:<type>=<x>', 'dilation=<x>', "
        "'scale=<x>' or 'queue=<KiB>' "
        "(with --only)",
    )
    ap.add_argument("--only", default="", help="model:plan pairs for --factor, e.g. 2EMB:aibox")
    ap.add_argument(
        "--extra",
        default="",
        help="fixed plans to run too: 'MODEL:NAME=type:layers:units,...;...', "
        "e.g. '2EMB:v100=core:2:128,V100:8:1'",
    )
    args = ap.parse_args()
    console = Console(width=220)
    console.print(f"load average at start: {os.getloadavg()[0]:.1f} (2-core machine shared with other jobs)")
    start = time.perf_counter()
    if args.factor:
        one_factor(args, console)
        console.print(
            f"load average at end: {os.getloadavg()[0]:.1f}; total {time.perf_counter() - start:.0f} s"
        )
        return
    models = args.models.split(",")
    chosen = {m: plans(m, args.pool, args.limit, args.rl_seconds, args.extra) for m in models}
    for m, ps in chosen.items():
        for name, r in ps.items():
            console.print(
                f"{m} {name}: {describe(r)}; predicted {r.throughput:.4g} samples/s, {r.money:.4g} USD"
            )
    runs: dict[tuple[str, str], list[HeterogeneousRun]] = {(m, n): [] for m in models for n in chosen[m]}
    for rep in range(args.repeats):
        for m in models:
            spec = zoo.model(m)
            cfg = config(args, m, rep)
            for name, r in chosen[m].items():
                run = measure_plan(spec, zoo.cluster(args.pool), r.plan, None, config=cfg)  # type: ignore[arg-type]
                runs[(m, name)].append(run)
                status = (
                    f"{run.throughput:.4g} samples/s ({run.ratio:.3f} of predicted)" if run.ok else run.reason
                )
                console.print(f"  repeat {rep} {m} {name}: {status}; {run.wall_s:.1f} s wall", style="dim")
    t = Table(
        title=f"Measured vs cost model on {args.pool}, limit {args.limit:g} samples/s, "
        f"{args.repeats} interleaved repeats, money in USD per 1e9 samples"
    )
    for col in (
        "model",
        "plan",
        "stages (layers:type x units)",
        "pred. samples/s",
        "meas. median",
        "95 % range",
        "ratio",
        "pred. money",
        "meas. money",
        "meets limit",
        "bottleneck (meas.)",
        "scale / D",
    ):
        t.add_column(col, justify="right")
    verdicts: list[str] = []
    for m in models:
        money: dict[str, float] = {}
        for name, r in chosen[m].items():
            rs = [x for x in runs[(m, name)] if x.ok]
            if not rs:
                t.add_row(
                    m, name, describe(r), f"{r.throughput:.4g}", "failed", runs[(m, name)][0].reason[:60]
                )
                verdicts.append(f"{m} {name}: every run failed")
                continue
            thr = statistics.median(x.throughput for x in rs)
            pooled = np.concatenate([x.samples for x in rs])
            lo, hi = np.percentile(pooled, [2.5, 97.5])
            money[name] = statistics.median(x.money for x in rs)
            ratio = thr / r.throughput
            slow = max(
                range(len(rs[0].stages)), key=lambda i: statistics.median(x.stages[i].period_s for x in rs)
            )
            st = rs[0].stages[slow]
            kind = (
                "compute" if st.compute_s >= statistics.median(x.stages[slow].comm_s for x in rs) else "comm"
            )
            t.add_row(
                m,
                name,
                describe(r),
                f"{r.throughput:.4g}",
                f"{thr:.4g}",
                f"{lo:.4g}-{hi:.4g}",
                f"{ratio:.3f}",
                f"{r.money:.4g}",
                f"{money[name]:.4g}",
                "yes" if thr >= args.limit else "NO",
                f"stage {slow} ({kind})",
                f"{rs[0].scale:.3g} / {rs[0].dilation:.3g}",
            )
            if abs(ratio - 1) > 0.2:
                verdicts.append(f"{m} {name}: measured/predicted {ratio:.3f}, outside +-20 %")
        if "rl" in money:
            if statistics.median(x.throughput for x in runs[(m, "rl")] if x.ok) < args.limit:
                verdicts.append(f"{m} rl: below the throughput limit, measured")
            if "aibox" in money and not money["rl"] < money["aibox"]:
                verdicts.append(
                    f"{m} rl: {money['rl']:.4g} USD, not below AIBox's {money['aibox']:.4g}, measured"
                )
    console.print(t)
    console.print("targets: " + ("all met" if not verdicts else "; ".join(verdicts)))
    console.print(f"load average at end: {os.getloadavg()[0]:.1f}; total {time.perf_counter() - start:.0f} s")


def config(
    args: argparse.Namespace,
    model: str,
    rep: int,
    backward: bool = True,
    dilation: float | None = None,
    local_tables: bool | None = None,
    scale: float | None = None,
    queue: int | None = None,
    pace: bool = True,
    ack_priority: bool = False,
) -> MeasureConfig:
    return MeasureConfig(
        Workload(args.limit, batch_size=zoo.model(model).batch_size),
        iterations=args.iterations,
        warmup=args.warmup,
        scale=scale or args.scale,
        data_queue_kib=queue,
        dilation=dilation or args.dilation,
        max_groups=args.max_groups,
        testbed=not args.loopback,
        seed=rep,
        backward=backward,
        local_tables=args.local_tables if local_tables is None else local_tables,
        pace=pace,
        ack_priority=ack_priority,
    )


def varied_cluster(pool: str, factor: str) -> ClusterSpec:
    """``pool`` with the NIC share of the types matching ``nic:<type>=<x>`` multiplied by x."""
    cluster = zoo.cluster(pool)
    if not factor.startswith("nic:"):
        return cluster
    name, _, x = factor[4:].partition("=")
    types = tuple(
        t.model_copy(update={"nic_gbps": t.nic_gbps * float(x)}) if name in t.name else t
        for t in cluster.resource_types
    )
    return cluster.model_copy(update={"resource_types": types})


def one_factor(args: argparse.Namespace, console: Console) -> None:
    pairs = [tuple(p.split(":")) for p in args.only.split(",") if p]
    known = args.factor in ("backward", "local-tables", "no-pace", "ack-priority") or args.factor.startswith(
        ("nic:", "dilation=", "scale=", "queue=")
    )
    if not pairs or not known:
        raise SystemExit(
            "--factor: 'backward', 'local-tables', 'no-pace', 'ack-priority', 'nic:<type>=<x>', "
            "'dilation=<x>', 'scale=<x>' or 'queue=<KiB>', "
            "with --only model:plan[,...]"
        )
    stretch = float(args.factor.partition("=")[2]) if args.factor.startswith("dilation=") else 1.0
    shrink = float(args.factor.partition("=")[2]) if args.factor.startswith("scale=") else 1.0
    chosen = {m: plans(m, args.pool, args.limit, args.rl_seconds, args.extra) for m in {m for m, _ in pairs}}
    base: dict[tuple[str, ...], list[HeterogeneousRun]] = {p: [] for p in pairs}
    varied: dict[tuple[str, ...], list[HeterogeneousRun]] = {p: [] for p in pairs}
    cluster = zoo.cluster(args.pool)
    other = varied_cluster(args.pool, args.factor)
    for rep in range(args.repeats):
        for m, name in pairs:
            plan = chosen[m][name].plan
            assert plan is not None
            base[(m, name)].append(
                measure_plan(zoo.model(m), cluster, plan, None, config=config(args, m, rep))
            )
            first = base[(m, name)][-1]
            cfg = config(
                args,
                m,
                rep,
                backward=args.factor != "backward",
                dilation=first.dilation * stretch if stretch != 1.0 else None,
                local_tables=not args.local_tables if args.factor == "local-tables" else None,
                scale=first.scale * shrink if shrink != 1.0 else None,
                queue=int(args.factor.partition("=")[2]) if args.factor.startswith("queue=") else None,
                pace=args.factor != "no-pace",
                ack_priority=args.factor == "ack-priority",
            )
            run = measure_plan(zoo.model(m), other, plan, None, config=cfg)
            varied[(m, name)].append(run)
            console.print(
                f"  repeat {rep} {m} {name}: {first.throughput:.4g} (D {first.dilation:.3g}) -> "
                f"{run.throughput:.4g} (D {run.dilation:.3g}); load {os.getloadavg()[0]:.1f}",
                style="dim",
            )
    t = Table(title=f"One factor: {args.factor} on {args.pool}, {args.repeats} interleaved repeats")
    label = "no backward gradients" if args.factor == "backward" else args.factor
    stage_cols = "period / comm / sparse ms"
    cols = ("model", "plan", "pred. samples/s", "as built", "ratio", stage_cols, label, "ratio")
    for col in (*cols, stage_cols):
        t.add_column(col, justify="right")
    for m, name in pairs:
        pred = chosen[m][name].throughput
        cells: list[str] = []
        for runs in (base[(m, name)], varied[(m, name)]):
            ok = [x for x in runs if x.ok]
            thr = statistics.median(x.throughput for x in ok)
            cells += [f"{thr:.4g}", f"{thr / pred:.3f}", comm_sparse(ok)]
        t.add_row(m, name, f"{pred:.4g}", *cells)
    console.print(t)


def comm_sparse(runs: list[HeterogeneousRun]) -> str:
    """Every stage's median period / communication / sparse time, ms per iteration (real cluster)."""
    out = []
    for i in range(len(runs[0].stages)):
        period, comm, sparse = (
            statistics.median(getattr(x.stages[i], f) for x in runs) * 1e3
            for f in ("period_s", "comm_s", "sparse_s")
        )
        out.append(f"s{i}: {period:.3g} / {comm:.3g} / {sparse:.3g}")
    return "; ".join(out)


if __name__ == "__main__":
    main()
