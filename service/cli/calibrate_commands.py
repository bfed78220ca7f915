"""`strategist calibrate`: fit a cluster's link latency and bandwidth from nccl-tests output."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from service.cli.spec_commands import fail, resolve_cluster
from simulator.spec import SpecError, dump_json


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` command to the root app."""
    app.command("calibrate")(calibrate)


def calibrate(
    cluster: str = typer.Option(..., "--cluster", help="Zoo cluster name or cluster JSON file."),
    nccl_tests: list[Path] = typer.Option(
        ...,
        "--nccl-tests",
        help="nccl-tests output (all_reduce_perf, all_gather_perf, sendrecv_perf, ...); repeatable.",
    ),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Where to write the calibrated cluster (default: NAME-calibrated.json)."
    ),
    name: str | None = typer.Option(
        None, "--name", help="Name of the calibrated cluster (default: NAME-calibrated)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the fits as JSON."),
) -> None:
    """Fit α (latency, us) and β (bus bandwidth, GB/s) per scope and collective; write the calibrated cluster."""
    from simulator.calibrate import NcclParseError, calibrated_cluster, fit_links, load_nccl_tests

    base = resolve_cluster(cluster)
    try:
        fits = fit_links([load_nccl_tests(p) for p in nccl_tests])
        calibrated = calibrated_cluster(base, fits, name)
    except NcclParseError as e:
        raise fail(f"--nccl-tests: {e}") from None
    except SpecError as e:
        raise fail(f"--cluster: the calibrated cluster is invalid: {e}") from None
    path = output or Path(f"{calibrated.name}.json")
    path.write_text(dump_json(calibrated) + "\n")
    rows = [
        {
            "scope": f.scope,
            "collective": f.collective,
            "alpha_us": f.alpha_us,
            "beta_gbs": f.beta_gbs,
            "rows": f.rows,
            "rms_rel_error": f.rms_rel_error,
            "files": list(f.files),
        }
        for f in fits.values()
    ]
    if as_json:
        typer.echo(json.dumps({"cluster": calibrated.name, "output": str(path), "fits": rows}, indent=2))
        return
    typer.echo(
        f"{'scope':6s} {'collective':13s} {'alpha us':>9s} {'beta GB/s':>10s} {'rows':>5s} {'rms rel':>8s}"
    )
    for r in rows:
        typer.echo(
            f"{r['scope']:6s} {r['collective']:13s} {r['alpha_us']:9.2f} {r['beta_gbs']:10.2f} "
            f"{r['rows']:5d} {r['rms_rel_error']:8.3f}"
        )
    typer.echo(f"calibrated cluster {calibrated.name!r} written to {path}")
