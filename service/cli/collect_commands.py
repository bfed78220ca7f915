"""`strategist collect`: measure sampled strategies (and the baselines) on the emulated cluster.

    strategist collect --model M --cluster C -n N --sampler {random,constrained} --seed S
                       [--compression none|fp16|powersgd|all] [--dilation auto|D] [--scale X]
                       [--compute replay] [--warmup W] [--iterations I] [--out DIR]
                       [--reference-every N]

Records are appended to ``DIR/<model>__<cluster>/<sampler>-seed<S>-<compression>.jsonl``
(default DIR: datasets/runtimes-v2, the re-collection with the issue-13 protocol that will replace
datasets/runtimes once complete; lossless and lossy collections land in different files); see
datasets/README.md, "Runtime records". Running the same command again continues the collection:
strategies already in the file are skipped. The measurement protocol (interleaved baselines,
clean tree, noisy trials measured again, the optional drift reference) is ``runtime.collect``'s;
with ``--reference-every N`` the horovod baseline is the reference and the command ends by
printing its times over the run, each over their median.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from service.cli.spec_commands import fail, resolve_cluster, resolve_model
from simulator.zoo import datasets_dir

#: Where new collections go: format-2 records (time dilation, probe, protocol) kept apart from the
#: format-1 dataset in datasets/runtimes until the re-collection is complete (datasets/README.md).
NEW_RUNTIMES = "runtimes-v2"


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
        "none",
        "--compression",
        help="none|fp16|powersgd|all: compressors sampled (default none: lossless; lossy goes to its own file).",
    ),
    dilation: str = typer.Option(
        "auto", "--dilation", help="Time dilation D (replay), or 'auto' (runtime.testbed.suggest_dilation)."
    ),
    scale: float | None = typer.Option(
        None, "--scale", help="Bytes divisor (default: suggest_scale / D; bandwidth is divided by scale x D)."
    ),
    compute: str = typer.Option("replay", "--compute", help="'replay' or 'real'."),
    warmup: int = typer.Option(3, "--warmup", min=0, help="Iterations before measuring."),
    iterations: int = typer.Option(10, "--iterations", min=1, help="Iterations measured per trial."),
    timeout: float = typer.Option(600.0, "--timeout", min=1, help="Seconds one trial may take."),
    baselines: bool = typer.Option(True, "--baselines/--no-baselines", help="Also measure the baselines."),
    retries: int = typer.Option(
        2, "--retries", min=0, help="Measurements again of a trial run while the host was busy (noisy)."
    ),
    max_foreign: float = typer.Option(
        0.25,
        "--max-foreign-share",
        min=0.0,
        max=1.0,
        help="Share of CPU used by others that makes a trial noisy.",
    ),
    fallback: bool = typer.Option(
        False, "--allow-unshaped", help="Run on unshaped loopback if namespaces are unavailable."
    ),
    out: Path | None = typer.Option(None, "--out", help="Dataset folder (default datasets/runtimes-v2)."),
    reference_every: int = typer.Option(
        0,
        "--reference-every",
        min=0,
        help="Measure the horovod baseline again before the first trial, after every N trials and "
        "after the last, as a drift reference (0: off).",
    ),
) -> None:
    """Run N sampled strategies plus the baselines on the testbed and append their measurements."""
    # Imported here: torch and the executor cost seconds, which no other command should pay.
    from runtime.collect import (
        REFERENCE,
        DirtyTreeError,
        Trial,
        baseline_trials,
        collect,
        interleave,
        output_path,
        reference_drift,
    )
    from runtime.executor import ExecutorConfig
    from runtime.testbed import dilated_scales
    from search import InfeasibleSpaceError, make_sampler
    from search.space import COMPRESSIONS, SpaceConfig, compressor_kinds
    from simulator.analytical import baseline

    if compression not in COMPRESSIONS:
        raise fail(f"--compression: unknown {compression!r}; expected one of {', '.join(COMPRESSIONS)}")
    if sampler not in ("random", "constrained"):
        raise fail(f"--sampler: unknown {sampler!r}; expected 'random' or 'constrained'")
    if compute not in ("replay", "real"):
        raise fail(f"--compute: unknown {compute!r}; expected 'replay' or 'real'")
    m, c = resolve_model(model), resolve_cluster(cluster)
    try:
        d_asked = None if dilation == "auto" else float(dilation)
    except ValueError:
        raise fail(f"--dilation: expected 'auto' or a number >= 1, got {dilation!r}") from None
    try:
        if compute == "real":
            sc, d = scale or 1.0, d_asked or 1.0
        else:
            sc, d = dilated_scales(c, d_asked)
            sc = scale if scale is not None else sc
        config = ExecutorConfig(compute=compute, warmup=warmup, iterations=iterations,  # type: ignore[arg-type]
                                timeout_s=timeout, startup_timeout_s=600, scale=sc, dilation=d)  # fmt: skip
    except ValueError as e:
        raise fail(f"--scale/--dilation: {e}") from None
    try:
        space = SpaceConfig(compressors=compressor_kinds(compression))
        strategies = make_sampler(sampler, m, c, seed, space=space).sample(n)  # type: ignore[arg-type]
    except InfeasibleSpaceError as e:
        raise fail(f"--model: nothing fits in memory on {c.name}: {e}") from None
    sampled = [Trial(s, f"sampler:{sampler}", i) for i, s in enumerate(strategies)]
    trials = interleave(baseline_trials(m, c) if baselines else [], sampled, seed)
    reference = None
    if reference_every:
        reference = Trial(baseline("horovod", m, c), f"{REFERENCE}horovod", 0)
    path = output_path(out or datasets_dir() / NEW_RUNTIMES, m, c, f"{sampler}-seed{seed}-{compression}")
    console = Console(stderr=True)
    console.print(
        f"{m.name} on {c.name}: {len(trials)} trials at scale {sc:g}, dilation {d:g} "
        f"(links at 1/{sc * d:g} of the cluster's) -> {path}"
    )
    counts = {"ok": 0, "failed": 0}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[last]}"), console=console) as bar:  # fmt: skip
        task = bar.add_task("collect", total=len(trials), last="")

        def on_record(rec: dict[str, Any]) -> None:
            trial = not rec.get("reference")  # a drift reference's repeat is not one of the trials
            if trial:
                counts["ok" if rec["ok"] else "failed"] += 1
            last = f"{rec['median_s'] * 1e3:.0f} ms" if rec["ok"] else f"failed: {str(rec['failure'])[:60]}"
            bar.update(task, advance=int(trial), last=f"{rec['source']} {last}")

        try:
            final = collect(m, c, trials, path, config=config, allow_fallback=fallback, on_record=on_record,
                            max_foreign_share=max_foreign, retries=retries, reference=reference,
                            reference_every=reference_every)  # fmt: skip
        except DirtyTreeError as e:
            raise fail(str(e)) from None
    console.print(f"{counts['ok']} measured, {counts['failed']} failed -> {final}")
    drift = reference_drift(final)
    if drift:
        console.print(
            f"drift reference (horovod), {len(drift)} measurements in this file, each over their median: "
            f"{min(drift):.3f}-{max(drift):.3f} (the last 12 in order: {' '.join(f'{x:.2f}' for x in drift[-12:])})"
        )
