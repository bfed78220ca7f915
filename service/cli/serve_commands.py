"""`strategist serve` (everything in one command) and `strategist demo` (a small real search, end to end).

`serve`: migrate the database, serve the API, run the search loop and an embedded testbed worker.
`demo`: the same in a fresh data folder, then create a small search through the HTTP API, watch it
run on the emulated cluster, and print the best strategy, its measured time and its speed-up over
the tuned Horovod and PS baseline families (fastest measured member of each) with the 95 % interval
of each ratio. The search is lossless unless ``--compression`` opts in; a lossy winner is compared
with the lossy baselines only and gets a time-to-accuracy check (``runtime.accuracy``). Where network
namespaces are not allowed (no root), the testbed falls back to unshaped loopback and the demo says so.
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from runtime.worker import TOKEN_ENV
from service.cli.search_cli_commands import (
    as_json,
    best_table,
    describe_strategy,
    honest_lines,
    watch_search,
)
from service.cli.spec_commands import fail
from service.client import StrategistClient
from service.loop.stack import Stack, StackConfig
from service.queue.worker_main import EXIT_TOKEN_REFUSED
from service.settings import Settings


def load_settings() -> Settings:
    """The settings from the environment; a bad value exits 2 with one line naming the setting."""
    try:
        return Settings()
    except ValidationError as e:
        err = e.errors()[0]
        message = str(err["msg"]).removeprefix("Value error, ")
        # A check across settings (pretrain_repeats against pretrain_dirs) has no location; its
        # message starts with the setting's name.
        name = ".".join(str(x) for x in err["loc"]) or message.partition(": ")[0]
        reason = message.removeprefix(f"{name}: ")
        raise fail(f"setting {name} (STRATEGIST_{name.upper()}): {reason}") from None


def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on (default: settings' api_host).")] = "",
    port: Annotated[int, typer.Option(help="Port (default: settings' api_port; 0 = any free one).")] = -1,
    worker: Annotated[bool, typer.Option(help="Start the embedded testbed worker.")] = True,
    loop: Annotated[bool, typer.Option(help="Run the search loop in this process.")] = True,
    worker_token: Annotated[
        str,
        typer.Option(
            help=f"Ensure a worker token with this secret (bootstraps remote workers; or ${TOKEN_ENV}).",
            envvar=TOKEN_ENV,
            show_default=False,
        ),
    ] = "",
    api_workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="uvicorn worker processes for the API (production: about one per core; 1 = a thread here).",
        ),
    ] = 1,
    pretrain_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--pretrain-dir",
            help="Runtime-record folder (<model>__<cluster>/*.jsonl[.gz]) the pretrained transfer simulator "
            "also trains on; repeat for more (added to the pretrain_dirs setting).",
            show_default=False,
        ),
    ] = None,
    pretrain_repeat: Annotated[
        list[str] | None,
        typer.Option(
            "--pretrain-repeat",
            help="DIR=REPEAT: a folder of whole repeat runs of a pretrain folder's collections; each "
            "repeated domain trains on both runs merged (added to the pretrain_repeats setting).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run strategist: migrations, API, search loop and an embedded testbed worker, until Ctrl-C."""
    settings = load_settings()
    if pretrain_dir:
        try:
            settings = settings.with_pretrain_dirs(pretrain_dir)
        except ValueError as e:
            raise fail(f"--pretrain-dir: {str(e).removeprefix('pretrain_dirs: ')}") from None
    if pretrain_repeat:
        try:
            settings = settings.with_pretrain_repeats(pretrain_repeat)
        except ValueError as e:
            raise fail(f"--pretrain-repeat: {str(e).removeprefix('pretrain_repeats: ')}") from None
    if host:
        settings = settings.model_copy(update={"api_host": host})
    config = StackConfig(
        embedded_worker=worker,
        loop=loop,
        port=port if port >= 0 else None,
        worker_token=worker_token,
        api_workers=api_workers,
    )
    stack = Stack(settings, config)
    stack.start()
    typer.echo(
        f"strategist serving at {stack.url}  (database {settings.database_url}; broker {settings.broker_url})"
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        while not done.wait(1.0):
            if stack.worker is None or stack.worker.poll() is None:
                continue
            if stack.worker.returncode == EXIT_TOKEN_REFUSED:  # a restart would be refused again
                typer.echo(
                    "embedded worker stopped: the API refused its token (revoked?); not restarting it."
                    " Searches on its clusters report the stall; remove embedded-worker.token in the"
                    " data folder and restart serve to issue a new one",
                    err=True,
                )
                stack.worker = None
                continue
            typer.echo(f"embedded worker exited with {stack.worker.returncode}; restarting it", err=True)
            stack.start_worker()
    finally:
        stack.stop()


def demo(
    model: Annotated[str, typer.Option(help="Zoo model of the demo search.")] = "NCF-dense",
    cluster: Annotated[str, typer.Option(help="Zoo cluster of the demo search.")] = "B9",
    budget: Annotated[int, typer.Option(help="Candidate trials in total.")] = 6,
    per_round: Annotated[int, typer.Option(help="Candidates per round.")] = 3,
    samples: Annotated[int, typer.Option(help="Strategies sampled and scored per round.")] = 300,
    iterations: Annotated[int, typer.Option(help="Measured iterations per trial.")] = 6,
    compression: Annotated[
        str, typer.Option(help="none (lossless, default) | fp16 | powersgd | all: lossy compression opt-in.")
    ] = "none",
    data_dir: Annotated[
        Path | None, typer.Option(help="Data folder (default: a fresh temporary one, removed after).")
    ] = None,
) -> None:
    """Start everything in a fresh folder, run a small real search on the testbed, print the result."""
    console = Console()
    with tempfile.TemporaryDirectory(prefix="strategist-demo-") as tmp:
        folder = data_dir or Path(tmp)
        settings = Settings(
            data_dir=folder,
            database_url="",
            broker_url="",
            simulators_dir=None,
            api_host="127.0.0.1",
            heartbeat_timeout_s=30.0,
            sweep_interval_s=5.0,
        )
        flags = {
            "iterations": iterations,
            "warmup": 2,
            "heartbeat": 2.0,
            "clusters": cluster,
            "log_level": "warning",
        }
        with Stack(settings, StackConfig(worker_flags=flags, port=0)) as stack:
            console.print(f"[bold]strategist demo[/]: API at {stack.url}, data in {folder}")
            token = _user_token(stack)
            client = StrategistClient(stack.url, token)
            started = time.monotonic()
            search_id = client.create_search(
                model=model,
                cluster=cluster,
                trial_budget=budget,
                candidates_per_round=per_round,
                samples_per_round=samples,
                name="demo",
                compression=compression,
            ).id
            final = as_json(watch_search(client, search_id, console, interval_s=1.0))
            elapsed = time.monotonic() - started
            _print_result(console, client, search_id, final, elapsed)
            if final["search"]["state"] != "completed":
                raise typer.Exit(1)


def _user_token(stack: Stack) -> str:
    from service.db import repository as repo

    with stack.sessions() as session:
        return repo.create_token(session, name="demo", role="user").secret


def _print_result(
    console: Console, client: StrategistClient, search_id: int, final: dict[str, Any], elapsed_s: float
) -> None:
    trials = [as_json(t) for t in client.trials(search_id)]
    rounds = [as_json(r) for r in client.rounds(search_id)]
    s = final["search"]
    console.print(best_table(final, trials))
    console.print(f"[bold]search {search_id}[/]: {s['state']} in {elapsed_s:.0f} s, {len(rounds)} rounds")
    for r in rounds:
        if r.get("finished_at") and r.get("created_at"):
            secs = _seconds(r["finished_at"]) - _seconds(r["created_at"])
            console.print(f"  round {r['index']}: scored by {r['simulator_kind']}, {secs:.0f} s")
    envs = {json_env(t) for t in trials if t.get("measurement")}
    for env in sorted(envs):
        console.print(f"  testbed: {env}")
    best = next((t for t in trials if t["id"] == final.get("best_trial_id")), None)
    if best is None:
        console.print("[red]no candidate trial succeeded[/]")
        return
    console.print(
        f"[bold]best strategy[/] (trial {best['id']}): {escape(describe_strategy(best['strategy']))}"
    )
    console.print(f"  measured median iteration time: {best['median_time']:.3f} s")
    lossy = next((r for r in final.get("reports", []) if r["space"] == "lossy" and r.get("winner")), None)
    if lossy is not None:  # the time-to-accuracy run replaces "lossy, accuracy not verified"
        console.print(
            "running the time-to-accuracy check of the lossy winner (teacher task, real compute)..."
        )
        lossy["accuracy"] = accuracy_line(final, trials, lossy)
    for line in honest_lines(final):
        console.print(escape(line))


def accuracy_line(final: dict[str, Any], trials: list[dict[str, Any]], lossy: dict[str, Any]) -> str:
    """Run the time-to-accuracy check of the lossy winner (runtime.accuracy) against the fastest
    tuned lossless baseline, on the search's cluster topology; its verdict in one line."""
    from runtime.accuracy import time_to_accuracy
    from simulator import zoo
    from simulator.spec import Strategy

    label = lossy["winner"]["label"]
    winner = next((t for t in trials if f"trial:{t['id']}" == label), None)
    base = [f["tuned"] for f in final.get("families", []) if not f["lossy"] and f.get("tuned")]
    if winner is None or not base:
        return f"{label}: lossy, accuracy not verified (no lossless baseline measured)"
    fastest = min(base, key=lambda m: m["median"])
    check = time_to_accuracy(
        Strategy.model_validate(winner["strategy"]),
        zoo.cluster(final["search"]["cluster_name"]),  # the demo's clusters are zoo clusters
        step_times=(fastest["median"], lossy["winner"]["median"]),
    )
    return f"{label} vs {fastest['label']}: {check.verdict()}"


def json_env(trial: dict[str, Any]) -> str:
    env = (trial.get("measurement") or {}).get("environment") or {}
    if env.get("shaped") is False:
        return f"UNSHAPED loopback ({env.get('fallback_reason', 'namespaces unavailable')})"
    return f"{env.get('testbed', 'netns')} shaped, scale {env.get('scale', '?')}"


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


def register(app: typer.Typer) -> None:
    """Add ``strategist serve`` and ``strategist demo`` to the root app."""
    app.command("serve")(serve)
    app.command("demo")(demo)
