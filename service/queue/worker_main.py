"""`strategist worker`: run trials from the service's queue on the testbed or on this host's GPUs.

Also runnable as ``python -m service.queue.worker_main`` (what `serve` starts): this module imports
only the worker, the queue and the zoo, so a worker starts in seconds, not after every CLI group.

How a worker finds work (the trade-off): it *pulls through the API* — every trial is claimed with
``POST /api/v1/workers/claim`` using a worker token, so a GPU host needs no database credentials and
no inbound connection (docs/service.md: workers pull, no ssh into GPU hosts). With ``--broker`` it also
consumes Celery nudges from the queues of its clusters, which wakes it the moment a trial is
queued; without a broker it polls the API every ``--poll`` seconds (simpler to deploy, adds up to
that much latency per trial and one cheap request per poll). Either way the claim decides: a
duplicated or redelivered nudge claims nothing, so it never produces a second measurement.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from runtime.worker import TOKEN_ENV, Worker, WorkerConfig, wait_for_api
from runtime.worker.api import TokenRefused
from runtime.worker.pools import POOLS, gpu_refusal, local_gpu_names, runnable_clusters
from runtime.worker.session import die_with_parent
from simulator import zoo
from simulator.spec import ClusterSpec

log = logging.getLogger("strategist.worker")


def _fail(field: str, reason: str) -> typer.Exit:
    typer.echo(f"error: {field}: {reason}", err=True)
    return typer.Exit(2)


def worker(
    pool: Annotated[str, typer.Option(help="'testbed' (emulated cluster here) or 'gpu' (this host's GPUs).")],
    api: Annotated[str, typer.Option(help="Base URL of the strategist API.", envvar="STRATEGIST_API_URL")],
    token: Annotated[
        str,
        typer.Option(
            help=(
                "A worker-role token (zoo clusters, any user's searches) or your own token (your"
                f" uploaded clusters). Or ${TOKEN_ENV}."
            ),
            envvar=TOKEN_ENV,
            show_default=False,
        ),
    ] = "",
    clusters: Annotated[
        str,
        typer.Option(help="Comma-separated clusters to advertise; default: the zoo clusters that fit."),
    ] = "",
    broker: Annotated[
        str, typer.Option(help="Celery broker URL to consume nudges from (optional; else poll only).")
    ] = "",
    heartbeat: Annotated[float, typer.Option(help="Seconds between heartbeats of a running trial.")] = 2.0,
    poll: Annotated[float, typer.Option(help="Seconds between claim polls when idle.")] = 1.0,
    iterations: Annotated[
        int,
        typer.Option(help="Measured iterations per trial.", envvar="STRATEGIST_WORKER_ITERATIONS"),
    ] = 10,
    warmup: Annotated[int, typer.Option(help="Warm-up iterations per trial (not measured).")] = 3,
    compute: Annotated[str, typer.Option(help="'replay' (sleep per layer) or 'real'.")] = "replay",
    trial_timeout: Annotated[float, typer.Option(help="Seconds a trial may run before it fails.")] = 600.0,
    name: Annotated[str, typer.Option(help="Worker name shown on trials; default host-pid.")] = "",
    wait_api: Annotated[float, typer.Option(help="Seconds to wait for the API to come up.")] = 60.0,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    parent_pid: Annotated[
        int, typer.Option(help="Exit when this process exits (`strategist serve` passes its own pid).")
    ] = 0,
    lock_file: Annotated[
        str,
        typer.Option(help="Hold this lock while running; a second worker on it waits for the first to exit."),
    ] = "",
) -> None:
    """Claim trials from the API, run them, heartbeat while running, report the measurements."""
    if parent_pid:
        die_with_parent(parent_pid)  # first: nothing below may outlive a killed `serve`
    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise _fail("--log-level", f"must be debug, info, warning or error, got {log_level!r}")
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))  # one line per request is noise
    if pool not in POOLS:
        raise _fail("--pool", f"must be one of {', '.join(POOLS)}, got {pool!r}")
    if not token:
        raise _fail(
            "--token",
            f"an API token is required: a worker token, or your own for your uploaded clusters (or set ${TOKEN_ENV})",
        )
    if compute not in ("replay", "real"):
        raise _fail("--compute", f"must be 'replay' or 'real', got {compute!r}")
    if iterations < 1 or warmup < 0:
        raise _fail("--iterations/--warmup", "need iterations >= 1 and warmup >= 0")
    if lock_file:
        hold_lock(Path(lock_file))
    names = [c.strip() for c in clusters.split(",") if c.strip()] or runnable_clusters(
        pool, [zoo.cluster(n) for n in zoo.cluster_names()]
    )
    if not names:
        raise _fail("--clusters", f"no cluster fits the {pool} pool on this machine; name them explicitly")
    if pool == "gpu":  # advertise only what this host's GPUs can run, whatever --clusters says
        gpus = local_gpu_names()
        refused = [r for n in names if (r := gpu_refusal(_zoo_cluster(n), n, gpus))]
        if refused:
            raise _fail("--clusters", "refused: " + "; ".join(refused))
    options: dict[str, object] = {
        "iterations": iterations,
        "warmup": warmup,
        "compute": compute,
        "timeout_s": trial_timeout,
    }
    config = WorkerConfig(
        api_url=api,
        token=token,
        pool=pool,
        clusters=tuple(names),
        heartbeat_s=heartbeat,
        poll_s=poll if not broker else max(poll, 5.0),
        trial_timeout_s=trial_timeout + 60.0,
        trial_options=options,
    )
    if name:
        config = dataclasses.replace(config, name=name)
    wait_for_api(api, wait_api)
    w = Worker(config)
    logging.getLogger("strategist.worker").info(
        "worker %s: pool %s, clusters %s, %s",
        config.name,
        pool,
        ",".join(names),
        "nudges+poll" if broker else "poll",
    )
    if not broker:
        got = _stop_on_signals(w)
        w.serve_forever()
        w.shutdown()
        _exit_if_refused(w)
        if signal.SIGINT in got:
            raise typer.Exit(130)
        return

    # The idle poll stays on as the safety net for lost nudges; both paths share the worker's
    # one-trial-at-a-time lock. A refused token on either path ends the Celery consumer too.
    def poll_api() -> None:
        w.serve_forever()
        if w.refused:
            os.kill(os.getpid(), signal.SIGTERM)  # Celery's warm shutdown

    poller = threading.Thread(target=poll_api, name="poll", daemon=True)
    poller.start()
    from service.queue import consume_nudges, make_celery

    def drain(_trial_id: int) -> None:
        try:
            while w.run_once():
                pass
        except TokenRefused as e:
            w.refuse(str(e))
            os.kill(os.getpid(), signal.SIGTERM)

    consume_nudges(
        make_celery(broker),
        names,
        drain,
        hostname=f"{config.name}@strategist",
        on_shutdown=lambda: w.drain("worker warm shutdown"),
    )
    w.shutdown()
    _exit_if_refused(w)


#: Exit status of a worker whose token the API refused (a supervisor should not restart it as is).
EXIT_TOKEN_REFUSED = 3


def _exit_if_refused(w: Worker) -> None:
    if w.refused:
        raise typer.Exit(EXIT_TOKEN_REFUSED)


def hold_lock(path: Path) -> int:
    """Take an exclusive ``flock`` on ``path`` for the life of this process (waiting if held).

    ``serve`` gives its embedded worker a lock file in the data folder, so a restarted service
    never runs two embedded workers: a new worker waits until the old one is gone (the kernel drops
    the lock when a process dies, however it dies). The file holds the holder's pid, for the log.
    The descriptor is not inherited by trial processes (Python opens it close-on-exec).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        log.warning("worker: %s is held by pid %s; waiting for it to exit", path, holder)
        fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _stop_on_signals(w: Worker) -> list[int]:
    """SIGTERM and SIGINT drain the worker (its running trial is handed back); the signals seen."""
    got: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        got.append(signum)
        w.drain(f"worker stopping ({signal.Signals(signum).name})")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return got


def _zoo_cluster(name: str) -> ClusterSpec | None:
    """The zoo cluster of that name, None for a name this host cannot resolve (an uploaded one)."""
    try:
        return zoo.cluster(name)
    except KeyError:
        return None


if __name__ == "__main__":
    typer.run(worker)
