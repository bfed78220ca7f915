"""`strategist search export-trials N --format csv|json [-o FILE]`: a search's trials as a spreadsheet.

The rows are the API's ``GET /searches/N/trials/export`` (``service.plans.trial_export``): the same
columns for every plan kind, speed-ups against the search's result baseline with their interval.
Without ``-o`` the export goes to stdout; with it, a one-line summary goes to stdout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from service.cli import search_cli_commands as sc


def export_trials_cmd(
    search_id: Annotated[int, typer.Argument(help="Search id.")],
    fmt: Annotated[str, typer.Option("--format", help="csv or json.")] = "csv",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")
    ] = None,
    api: sc.ApiOpt = "http://127.0.0.1:8000",
    token: sc.TokenOpt = "",
) -> None:
    """Write every trial of a search as CSV or JSON (same columns for every plan kind)."""
    if fmt not in ("csv", "json"):
        typer.echo(f"error: --format: must be csv or json, got {fmt!r}", err=True)
        raise typer.Exit(2)
    client = sc._client(api, token)
    if fmt == "csv":
        text = sc._run(lambda: client.export_trials_csv(search_id))
        rows = max(0, text.count("\n") - 1)
    else:
        export = sc._run(lambda: client.export_trials(search_id))
        text = json.dumps(export.model_dump(mode="json"), indent=2) + "\n"
        rows = len(export.rows)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as e:
        typer.echo(f"error: --output: {output}: {e.strerror}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {output}: {rows} trials of search {search_id} ({fmt})")


def register(app: typer.Typer) -> None:
    """Add ``export-trials`` to the ``strategist search`` group."""
    sc.search_app.command("export-trials")(export_trials_cmd)
