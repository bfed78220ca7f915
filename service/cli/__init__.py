"""The `strategist` command line: one typer app; each command group lives in its own module."""

from __future__ import annotations

import typer

from service.cli import (
    admin_commands,
    agent_commands,
    calibrate_commands,
    collect_commands,
    cost_commands,
    export_commands,
    import_commands,
    profile_commands,
    search_cli_commands,
    search_commands,
    serve_commands,
    simulator_commands,
    spec_commands,
    spec_upload_commands,
    trials_export_commands,
    worker_commands,
)

app = typer.Typer(
    name="strategist",
    help="Learned strategy search for distributed deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
)

spec_commands.register(app)
spec_upload_commands.register(app)
import_commands.register(app)
cost_commands.register(app)
profile_commands.register(app)
calibrate_commands.register(app)
admin_commands.register(app)
serve_commands.register(app)
worker_commands.register(app)
search_cli_commands.register(app)
trials_export_commands.register(app)
search_commands.register(app)
collect_commands.register(app)
export_commands.register(app)
simulator_commands.register(app)
agent_commands.register(app)


def main() -> None:
    """Entry point of the console script."""
    app()
