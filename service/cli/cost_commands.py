"""`strategist cost`: the analytical cost (AutoSync Eq. 1-3) of a baseline or a strategy file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from service.cli.spec_commands import fail, resolve_cluster, resolve_model
from service.plans.memory_view import memory_parts
from simulator.analytical import CostBreakdown, CostParams, cost_breakdown
from simulator.analytical.alpha import nccl_params
from simulator.analytical.baselines import BASELINES, baseline
from simulator.spec import ClusterSpec, ModelSpec, SpecError, Strategy, load_spec
from simulator.spec.limits import LIMITS


def register(app: typer.Typer) -> None:
    """Add the ``cost`` command to the root app."""
    app.command("cost")(cost)


def cost(
    model: str = typer.Option(..., "--model", help="Zoo model name or model JSON file."),
    cluster: str = typer.Option(..., "--cluster", help="Zoo cluster name or cluster JSON file."),
    strategy: str = typer.Option(
        ..., "--strategy", help=f"A baseline ({', '.join(BASELINES)}) or a strategy JSON file."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    trials: int = typer.Option(
        24, "--trials", min=1, max=LIMITS.trial_budget, help="Optuna trials for the tuned baselines."
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=LIMITS.seed, help="Seed of the baselines' tuning."),
    profiles: Path | None = typer.Option(
        None,
        "--profiles",
        help="Measured profiles folder (default: datasets/profiles); one for this key replaces the roofline.",
    ),
    compute_dtype: str | None = typer.Option(
        None,
        "--compute-dtype",
        help="Mixed precision: run every layer in float32, tf32, float16 or bfloat16.",
    ),
    alpha: str = typer.Option(
        "eq3",
        "--alpha",
        help="Per-call latency: 'eq3' (Eq. 3's φ, δ and the nodes' latency_us) or 'nccl' (NCCL's "
        "published ring latencies per link kind, simulator.analytical.alpha).",
    ),
) -> None:
    """Predict T_comp, T_sync, the overlapped sync end E, T = max(T_comp, E), throughput and memory per GPU."""
    from service.cli.profile_commands import load_profiles

    m = resolve_model(model)
    c = resolve_cluster(cluster)
    s = _resolve_strategy(strategy, m, c, trials, seed)
    if alpha not in ("eq3", "nccl"):
        raise fail(f"--alpha: must be 'eq3' or 'nccl', got {alpha!r}")
    try:
        params = CostParams(compute_dtype=compute_dtype).with_profiles(load_profiles(profiles))  # type: ignore[arg-type]
    except ValueError as e:
        raise fail(f"--compute-dtype: {e}") from None
    if alpha == "nccl":
        params = nccl_params(c, params)
    result = cost_breakdown(m, c, s, params)
    memory = memory_parts(m, c, s)
    if as_json:
        out = {
            "model": m.name,
            "cluster": c.name,
            "strategy": s.name or strategy,
            **result.to_json(),
            "memory": memory,
        }
        typer.echo(json.dumps(out, indent=2))
    else:
        _print(result, m, c, s.name or strategy)
        _print_memory(memory)


def _resolve_strategy(ref: str, model: ModelSpec, cluster: ClusterSpec, trials: int, seed: int) -> Strategy:
    if ref in BASELINES:
        return baseline(ref, model, cluster, trials=trials, seed=seed)
    path = Path(ref)
    if not path.is_file():
        raise fail(f"--strategy: {ref!r} is neither a baseline ({', '.join(BASELINES)}) nor a file")
    try:
        spec = load_spec(path)
        if not isinstance(spec, Strategy):
            raise fail(f"--strategy: {ref}: is a {spec.kind} spec, expected a strategy")
        spec.check(model, cluster)
    except SpecError as e:
        raise fail(f"--strategy: {ref}: {e}") from None
    except OSError as e:
        raise fail(f"--strategy: {ref}: {e}") from None
    return spec


def _print(r: CostBreakdown, model: ModelSpec, cluster: ClusterSpec, name: str) -> None:
    console = Console()
    top = Table("quantity", "value", title=f"{name}: {model.name} on {cluster.name}")
    bound = "compute-bound: T = T_comp" if r.t_comp >= r.t_sync_end else "sync-bound: T = E"
    how = (
        "E: buckets start when their gradients are ready; a PS shard's pull overlaps the next push"
        if r.overlap == "bucket"
        else "E = T_sync (Eq. 1, full overlap)"
    )
    for label, value in [
        ("T_comp", f"{r.t_comp * 1e3:.3f} ms ({r.compute_source})"),
        ("T_sync^PS (busiest server, push + pull)", f"{r.t_ps * 1e3:.3f} ms"),
        ("T_sync^CC (all calls)", f"{r.t_cc * 1e3:.3f} ms"),
        ("T_sync (PS + CC, serialised)", f"{r.t_sync * 1e3:.3f} ms"),
        (f"E, overlapped sync end ({r.overlap} overlap)", f"{r.t_sync_end * 1e3:.3f} ms ({how})"),
        ("T = max(T_comp, E)", f"{r.t_iter * 1e3:.3f} ms ({bound})"),
        ("throughput", f"{r.throughput:,.1f} samples/s"),
        ("cost per iteration", f"${r.cost_per_iteration:.6f}"),
    ]:
        top.add_row(label, value)
    console.print(top)
    if r.ps:
        t = Table("server", "time ms", "transfer ms", "messages", "shards", "MB", title="PS servers (Eq. 2)")
        for node, sv in sorted(r.ps.items(), key=lambda kv: -kv[1].time):
            t.add_row(
                node,
                f"{sv.time * 1e3:.3f}",
                f"{sv.transfer * 1e3:.3f}",
                f"{sv.messages:g}",
                str(sv.shards),
                f"{sv.bytes / 1e6:.2f}",
            )
        console.print(t)
    if r.collective:
        t = Table("group", "op", "time ms", "transfer ms", "shards", "MB", title="Collective calls (Eq. 3)")
        for call in sorted(r.collective.values(), key=lambda cc: (cc.group, cc.op)):
            t.add_row(
                str(call.group),
                call.op,
                f"{call.time * 1e3:.3f}",
                f"{call.transfer * 1e3:.3f}",
                str(call.shards),
                f"{call.bytes / 1e6:.2f}",
            )
        console.print(t)


def _print_memory(mem: dict[str, Any]) -> None:
    console = Console()
    t = Table("part", "GB per GPU", title=f"memory per GPU ({mem['assumptions']}; simulator.memory)")
    for part, nbytes in mem["parts"].items():
        t.add_row(part, f"{nbytes / 1e9:.2f}")
    t.add_row("total", f"{mem['device_bytes'] / 1e9:.2f}")
    t.add_row("usable", f"{mem['device_capacity'] / 1e9:.2f}")
    for server, nbytes in mem["host_bytes"].items():
        t.add_row(f"PS server {server} host", f"{nbytes / 1e9:.2f}")
    console.print(t)
    if mem["fits"]:
        console.print("fits in memory")
    else:
        for reason in mem["reasons"]:
            console.print(f"[bold red]does not fit:[/] {escape(reason)}")
