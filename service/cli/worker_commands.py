"""`strategist worker`: the command lives in `service.queue.worker_main` (a light module a worker
process can start from without importing every CLI group); this registers it on the root app."""

from __future__ import annotations

import typer

from service.queue.worker_main import worker


def register(app: typer.Typer) -> None:
    """Add ``strategist worker`` to the root app."""
    app.command("worker")(worker)
