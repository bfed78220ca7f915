"""The `strategist` command line: one typer app; each command group lives in its own module."""

from __future__ import annotations

import typer

from service.cli import cost_commands, import_commands, spec_commands

app = typer.Typer(
    name="strategist",
    help="Learned strategy search for distributed deep-learning training.",
    no_args_is_help=True,
    add_completion=False,
)

spec_commands.register(app)
import_commands.register(app)
cost_commands.register(app)


def main() -> None:
    """Entry point of the console script."""
    app()
