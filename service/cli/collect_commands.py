"""`strategist collect`: measure sampled strategies (and the baselines) on the emulated cluster.

    strategist collect --model M --cluster C -n N --sampler {random,constrained} --seed S
                       [--scale X] [--compute replay] [--warmup W] [--iterations I] [--out DIR]

Records are appended to ``DIR/<model>__<cluster>/<sampler>-seed<S>-<UTC time>.jsonl``
(default DIR: datasets/runtimes); see datasets/README.md, "Runtime records".
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from service.cli.spec_commands import fail, resolve_cluster, resolve_model
from simulator.zoo import datasets_dir


def register(app: typer.Typer) -> None:
    """Add the ``collect`` command to the root app."""
    app.command("collect")(collect_command)


def collect_command(
    model: str = typer.Option(..., "--model", help="Zoo model name or model JSON file."),
    cluster: str = typer.Option(..., "--cluster", help="Zoo cluster name or cluster JSON file."),
    n: int = typer.Option(..., "-n", min=1, help="Sampled strategies to measure (baselines come on top)."),
    sampler: str = typer.Option("constrained", "--sampler", help="'random' or 'constrained'."),
    seed: int = typer.Option(0, "--seed", help="Sampler seed."),
    compression: str = typer.Option(
        "all",
        "--compression",
        help="none|fp16|powersgd|all: compressors sampled (a dataset covers every kind).",
    ),
    scale: float | None = typer.Option(None, "--scale", help="Bytes/bandwidth divisor (default: suggested)."),
    compute: str = typer.Option("replay", "--compute", help="'replay' or 'real'."),
    warmup: int = typer.Option(1, "--warmup", min=0, help="Iterations before measuring."),
    iterations: int = typer.Option(4, "--iterations", min=1, help="Iterations measured per trial."),
    timeout: float = typer.Option(60.0, "--timeout", min=1, help="Seconds one trial may take."),
    baselines: bool = typer.Option(True, "--baselines/--no-baselines", help="Also measure the baselines."),
    fallback: bool = typer.Option(
        False, "--allow-unshaped", help="Run on unshaped loopback if namespaces are unavailable."
    ),
    out: Path | None = typer.Option(None, "--out", help="Dataset folder (default datasets/runtimes)."),
) -> None:
    """Run N sampled strategies plus the baselines on the testbed and append their measurements."""
    # Imported here: torch and the executor cost seconds, which no other command should pay.
    from runtime.collect import Trial, baseline_trials, collect, output_path
    from runtime.executor import ExecutorConfig
    from runtime.testbed import suggest_scale
    from search import InfeasibleSpaceError, make_sampler
    from search.space import COMPRESSIONS, SpaceConfig, compressor_kinds

    if compression not in COMPRESSIONS:
        raise fail(f"--compression: unknown {compression!r}; expected one of {', '.join(COMPRESSIONS)}")
    if sampler not in ("random", "constrained"):
        raise fail(f"--sampler: unknown {sampler!r}; expected 'random' or 'constrained'")
    if compute not in ("replay", "real"):
        raise fail(f"--compute: unknown {compute!r}; expected 'replay' or 'real'")
    m, c = resolve_model(model), resolve_cluster(cluster)
    try:
        sc = scale if scale is not None else (1.0 if compute == "real" else suggest_scale(c))
        config = ExecutorConfig(compute=compute, warmup=warmup, iterations=iterations,  # type: ignore[arg-type]
                                timeout_s=timeout, startup_timeout_s=600, scale=sc)  # fmt: skip
    except ValueError as e:
        raise fail(f"--scale: {e}") from None
    try:
        space = SpaceConfig(compressors=compressor_kinds(compression))
        strategies = make_sampler(sampler, m, c, seed, space=space).sample(n)  # type: ignore[arg-type]
    except InfeasibleSpaceError as e:
        raise fail(f"--model: nothing fits in memory on {c.name}: {e}") from None
    trials = (baseline_trials(m, c) if baselines else []) + [
        Trial(s, f"sampler:{sampler}", i) for i, s in enumerate(strategies)
    ]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = output_path(out or datasets_dir() / "runtimes", m, c, f"{sampler}-seed{seed}-{stamp}")
    console = Console(stderr=True)
    console.print(f"{m.name} on {c.name}: {len(trials)} trials at scale {sc:g} -> {path}")
    counts = {"ok": 0, "failed": 0}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[last]}"), console=console) as bar:  # fmt: skip
        task = bar.add_task("collect", total=len(trials), last="")

        def on_record(rec: dict[str, Any]) -> None:
            counts["ok" if rec["ok"] else "failed"] += 1
            last = f"{rec['median_s'] * 1e3:.0f} ms" if rec["ok"] else f"failed: {str(rec['failure'])[:60]}"
            bar.update(task, advance=1, last=f"{rec['source']} {last}")

        final = collect(m, c, trials, path, config=config, allow_fallback=fallback, on_record=on_record)
    console.print(f"{counts['ok']} measured, {counts['failed']} failed -> {final}")
