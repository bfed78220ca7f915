"""Everything `strategist serve` runs, in one object: migrations, API, search loop, embedded worker.

- the database is migrated to head first (``db upgrade``), so a fresh data folder just works;
- the API (uvicorn) serves on its own thread, with the search loop as its orchestrator;
- the search loop ticks on its own thread (sweep, advance, retrain);
- an embedded testbed worker runs as a subprocess (``strategist worker --pool testbed``) with a
  worker token kept in the data folder, consuming nudges from the same broker. It dies with this
  process, however this process ends (``--parent-pid``: the kernel's parent-death signal), and
  holds ``embedded-worker.lock`` in the data folder (``--lock-file``), so a restarted service
  never runs two embedded workers; its trial processes die with it in turn.

Database and broker URLs come from Settings (embedded SQLite defaults, Redis/PostgreSQL when set).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from runtime.worker import TOKEN_ENV
from service.api.processes import KEEP_ALIVE_S
from service.db import repository as repo
from service.db.engine import make_engine, session_factory, upgrade
from service.loop import LoopConfig, SearchLoop, run_in_thread
from service.loop.jobs import JobBudget
from service.loop.simulators import RetrainConfig
from service.queue import Nudger, make_celery
from service.settings import Settings

log = logging.getLogger("strategist.serve")

#: Seconds ``stop`` waits for the embedded worker to drain (stop its trial, end the trial's
#: processes after their 15 s grace, hand the trial back) before it is killed.
WORKER_DRAIN_S = 45.0

#: Name of the embedded worker's user.
EMBEDDED_WORKER = "embedded-worker"


@dataclass(frozen=True)
class StackConfig:
    """What `serve` starts besides the API."""

    # Start a testbed worker subprocess (off when workers run elsewhere, e.g. docker-compose).
    embedded_worker: bool = True
    # Extra flags of the embedded worker (e.g. iterations=5, heartbeat=1.0).
    worker_flags: dict[str, object] = field(default_factory=dict)
    # Run the search loop in this process (off for an API-only replica).
    loop: bool = True
    # Seconds between loop ticks.
    tick_s: float = 1.0
    # uvicorn's log level.
    log_level: str = "warning"
    # Port to listen on instead of settings.api_port; 0 picks a free one (tests, the demo).
    port: int | None = None
    # If set, a worker token with exactly this secret is ensured at start (bootstrapping remote
    # workers, e.g. docker-compose's, which are given the same secret).
    worker_token: str = ""
    # uvicorn worker processes serving the API. 1: the API runs on a thread of this process with
    # the loop as its orchestrator; more: `uvicorn --workers N` in a child process (one GIL each,
    # so reads use several cores), whose apps store only and the loop polls the database.
    api_workers: int = 1


class Stack:
    """The running service; ``start`` then ``stop`` (also a context manager)."""

    def __init__(self, settings: Settings, config: StackConfig = StackConfig()) -> None:
        self.settings = settings
        self.config = config
        self.worker: subprocess.Popen[bytes] | None = None
        self._threads: list[threading.Thread] = []
        self._stop_loop: object = None
        self._server: uvicorn.Server | None = None
        self.api_process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from service.api.app import create_app

        s = self.settings
        s.ensure_dirs()
        upgrade(s.database_url)
        self.engine = make_engine(s.database_url, echo=s.echo_sql)
        self.sessions = session_factory(self.engine)
        self.nudger = Nudger(make_celery(s.broker_url))
        self.loop = SearchLoop(
            self.sessions,
            config=LoopConfig(
                tick_s=self.config.tick_s,
                sweep_s=s.sweep_interval_s,
                heartbeat_timeout_s=s.heartbeat_timeout_s,
                max_trial_attempts=s.max_trial_attempts,
                max_queued_trials=s.max_queued_trials,
                registry_dir=s.simulators_path,
                retrain=RetrainConfig(pretrain_datasets=s.pretrain_dirs, pretrain_repeats=s.pretrain_repeats),
                jobs=JobBudget(
                    time_s=s.round_time_budget_s,
                    memory_mb=s.round_memory_mb,
                    slots=s.round_workers,
                    retries=s.round_retries,
                ),
            ),
            nudger=self.nudger,
        )
        # Migrated just above; the app need not do it again.
        app_settings = s.model_copy(update={"migrate_on_start": False})
        app = create_app(app_settings, orchestrator=self.loop if self.config.loop else None)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((s.api_host, s.api_port if self.config.port is None else self.config.port))
        port = sock.getsockname()[1]
        self.url = f"http://{s.api_host}:{port}"
        if self.config.api_workers > 1:
            sock.close()
            from service.api.processes import start_api_processes

            self.api_process = start_api_processes(
                app_settings, port=port, workers=self.config.api_workers, log_level=self.config.log_level
            )
        else:
            self._server = uvicorn.Server(
                uvicorn.Config(
                    app,
                    log_level=self.config.log_level,
                    lifespan="on",
                    timeout_keep_alive=KEEP_ALIVE_S,
                    access_log=False,  # as the --api-workers processes: a log call per request
                )
            )
            api = threading.Thread(
                target=self._server.run, kwargs={"sockets": [sock]}, name="api", daemon=True
            )
            api.start()
            self._threads.append(api)
        self._wait_api()
        if self.config.worker_token:
            with self.sessions() as session:
                repo.ensure_token(session, name="worker", role="worker", secret=self.config.worker_token)
        if self.config.loop:
            self._stop_loop = run_in_thread(self.loop)
        if self.config.embedded_worker:
            self.start_worker()
        log.info("strategist serving at %s (database %s, broker %s)", self.url, s.database_url, s.broker_url)

    def start_worker(self) -> None:
        """Start (or restart) the embedded testbed worker subprocess.

        Call it from a thread that lives as long as the service (serve: the main thread): the
        worker's parent-death signal fires when the thread that started it exits.
        """
        argv = embedded_worker_argv(
            api=self.url,
            broker=self.settings.broker_url,
            flags={
                **self.config.worker_flags,
                "parent_pid": os.getpid(),
                "lock_file": Path(self.settings.data_dir) / "embedded-worker.lock",
            },
        )
        self.worker = subprocess.Popen(argv, env=worker_env(self.worker_token()))

    def worker_token(self) -> str:
        """The embedded worker's token: a secret kept (0600) in the data folder, registered once."""
        path = Path(self.settings.data_dir) / "embedded-worker.token"
        if not path.is_file():
            path.write_text("stg_" + secrets.token_urlsafe(32))
            path.chmod(0o600)
        secret = path.read_text().strip()
        with self.sessions() as session:
            repo.ensure_token(session, name=EMBEDDED_WORKER, role="worker", secret=secret)
        return secret

    def stop(self) -> None:
        """Tell the worker to drain (its running trial is handed back through the API, requeued
        with its attempt not spent, and its processes end), stop the loop (no new rounds), wait up
        to ``WORKER_DRAIN_S`` for the worker, then stop the API, which the release needs until then."""
        draining = self.worker is not None and self.worker.poll() is None
        if draining and self.worker is not None:
            # first: the drain starts now, not after the loop's retraining or jobs have stopped
            # (a trial left running meanwhile may finish, or its processes outlive serve)
            self.worker.terminate()
        if callable(self._stop_loop):
            self._stop_loop()
            self._stop_loop = None
        if draining and self.worker is not None:
            try:
                self.worker.wait(timeout=WORKER_DRAIN_S)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()
        if self._server is not None:
            self._server.should_exit = True
        if self.api_process is not None:
            from service.api.processes import stop_api_processes

            stop_api_processes(self.api_process)
        for t in self._threads:
            t.join(timeout=15)
        with contextlib.suppress(AttributeError):
            self.engine.dispose()

    def _wait_api(self, timeout_s: float = 30.0) -> None:
        if self.api_process is not None:
            from service.api.processes import wait_ready

            wait_ready(self.api_process, self.url, timeout_s=max(timeout_s, 120.0))
            return
        deadline = time.monotonic() + timeout_s
        while not (self._server is not None and self._server.started):
            if time.monotonic() > deadline or not self._threads[0].is_alive():
                raise RuntimeError(f"the API did not start on {self.url}")
            time.sleep(0.05)


def embedded_worker_argv(
    *, api: str, broker: str, pool: str = "testbed", flags: dict[str, object] | None = None
) -> list[str]:
    """The command line of a worker subprocess started by ``strategist serve``/``demo`` (token via env)."""
    argv = [
        sys.executable,
        "-m",
        "service.queue.worker_main",
        "--pool",
        pool,
        "--api",
        api,
    ]
    if broker:
        argv += ["--broker", broker]
    for key, value in (flags or {}).items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def worker_env(token: str) -> dict[str, str]:
    """Environment of an embedded worker: ours plus its token."""
    return {**os.environ, TOKEN_ENV: token}
