"""The trial worker: pulls trials from the service API, runs them, heartbeats, and reports measurements.

Contract (the queue delivers at least once; the database is the source of truth):
- a trial runs only after this worker *claimed* it through the API; a nudge (a queue message, or a
  poll tick) only says "there may be work", so a duplicated or redelivered nudge finds nothing to
  claim and never produces a second measurement;
- while a trial runs, a background thread heartbeats it every ``heartbeat_s``; if the API answers
  that the trial is no longer ours (it went stale and was requeued) the running trial is killed
  and nothing is reported; if it answers "stop" (the search was cancelled) the trial is killed and
  reported as stopped, which ends it 'cancelled';
- trials run in a child process (``runtime.worker.session.TrialProcess``) that keeps the emulated
  cluster and the executor's processes up between trials of one domain; it has its own process
  group, so a cancel stops everything it started, and it dies with the worker (PR_SET_PDEATHSIG);
- one trial at a time: a trial occupies the whole emulated cluster (or the host's GPUs);
- a 'gpu' pool trial of a search naming a model factory trains the user's own module, launched by
  torchrun on this host as the agents launch it (``runtime.worker.factory_trial``); the 'testbed'
  pool replays the ModelSpec extracted from it (replay stays the testbed's default);
- a 'gpu' pool worker with no trial to claim runs one profile job (``profile_jobs``) instead;
- a normal stop *drains* (``drain``: SIGTERM, Ctrl-C, Celery's warm shutdown): the running trial is
  stopped, its processes (the trial process, its group and every descendant: the executor's ranks
  run in sessions of their own) get SIGTERM then SIGKILL after ``drain_grace_s``, its spec folders
  are removed, and the trial is handed back (``POST /trials/{id}/release``): queued again at once
  with its attempt not counted; a running profile job likewise (its process ended, its temp
  folder removed, ``POST /profiles/jobs/{id}/release``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field

from runtime.worker.api import ApiClient, ClaimedTrial, TokenRefused
from runtime.worker.profile_jobs import ProfileJobClient, ProfileJobRunner
from runtime.worker.session import TrialProcess, session_key
from simulator.spec.measurement import Measurement

log = logging.getLogger("strategist.worker")

#: Environment variable that carries a worker's token (kept off the command line, where ps shows it).
TOKEN_ENV = "STRATEGIST_WORKER_TOKEN"


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker finds work and runs it."""

    # Base URL of the service, e.g. http://127.0.0.1:8000.
    api_url: str
    # A token with the worker role.
    token: str
    # 'testbed' (emulated cluster on this machine) or 'gpu' (the host's GPUs with NCCL).
    pool: str
    # Names of the clusters this worker advertises; it only claims trials on these.
    clusters: tuple[str, ...]
    # Seconds between heartbeats of a running trial (must be well under the service's stale timeout).
    heartbeat_s: float = 2.0
    # Seconds between claim polls when idle (the safety net behind queue nudges).
    poll_s: float = 1.0
    # A trial that runs longer than this is killed and reported as failed.
    trial_timeout_s: float = 600.0
    # The trial process (and its emulated cluster) is kept up between trials of one domain and
    # ended after this many idle seconds.
    session_idle_s: float = 120.0
    # How trials are measured: ExecutorConfig fields (compute, warmup, iterations, timeout_s, ...).
    trial_options: dict[str, object] = field(default_factory=dict)
    # On a drain, seconds the trial's processes get between SIGTERM and SIGKILL.
    drain_grace_s: float = 15.0
    # Name reported to the API (shown on trials).
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")


class Worker:
    """Claims and runs trials one at a time. ``run_once`` may be called from several threads."""

    def __init__(self, config: WorkerConfig, api: ApiClient | None = None) -> None:
        self.config = config
        self.api = api or ApiClient(config.api_url, config.token, worker_name=config.name)
        self._busy = threading.Lock()
        self._stopping = threading.Event()
        self._proc: TrialProcess | None = None
        self.trials_run = 0
        # A 'gpu' pool worker also runs profile jobs when no trial is queued (issue 15).
        self.profile_jobs: ProfileJobRunner | None = None
        if config.pool == "gpu":
            client = ProfileJobClient(config.api_url, config.token, worker_name=config.name)
            self.profile_jobs = ProfileJobRunner(client, drain_grace_s=config.drain_grace_s)
        # Why the API refused this worker's token (set when it stopped for that reason).
        self.refused: str | None = None
        # The trial being run: (its process, its verdict) while ``_run`` runs; ``drain`` stops it.
        self._running: tuple[TrialProcess, dict[str, bool]] | None = None
        self._draining = threading.Event()
        self._drain_lock = threading.Lock()
        self._killer: threading.Thread | None = None
        self.released = 0
        self._drain_reason = "worker stopping"

    def drain(self, reason: str = "worker stopping") -> None:
        """A normal stop: claim nothing more and hand the running trial back (module doc).

        Returns at once (safe in a signal handler); ``_run`` then waits for the trial's processes
        to end and releases the trial, and ``serve_forever`` returns.
        """
        self._stopping.set()
        self._draining.set()
        self._drain_reason = reason
        self._stop_running()
        if self.profile_jobs is not None:  # a profile job running instead is handed back too
            self.profile_jobs.drain(reason)

    def _stop_running(self) -> None:
        with self._drain_lock:
            running = self._running
            if running is None or self._killer is not None:
                return
            proc, verdict = running
            verdict["release"] = True
            self._killer = threading.Thread(
                target=proc.kill, kwargs={"grace_s": self.config.drain_grace_s}, name="drain-kill"
            )
            self._killer.start()

    def stop(self) -> None:
        """Claim nothing more; ``serve_forever`` returns after the trial in progress."""
        self._stopping.set()

    def run_once(self) -> bool:
        """Claim one trial and run it to the end; False when none was claimed or a trial is running."""
        if self._stopping.is_set() or not self._busy.acquire(blocking=False):
            return False  # stopping, or busy: one trial at a time (the running one polls again)
        try:
            if self._stopping.is_set():
                return False
            trial = self.api.claim(pool=self.config.pool, clusters=list(self.config.clusters))
            if trial is None:
                return self.profile_jobs.run_once() if self.profile_jobs is not None else False
            self._run(trial)
            self.trials_run += 1
            return True
        finally:
            self._busy.release()

    def serve_forever(self) -> None:
        """Poll the API for work until ``stop``; API outages are retried with back-off."""
        backoff = self.config.poll_s
        while not self._stopping.is_set():
            try:
                ran = self.run_once()
                backoff = self.config.poll_s
            except TokenRefused as e:
                self.refuse(str(e))
                return
            except Exception as e:  # an API outage must not kill a long-lived worker
                log.warning("worker: %s; retrying in %.1f s", e, backoff)
                ran = False
                backoff = min(backoff * 2, 30.0)
            if not ran:
                self.close_idle()
                self._stopping.wait(backoff)

    def refuse(self, reason: str) -> None:
        """Stop for good: the token is unknown or revoked, and no retry can fix that."""
        if self.refused is None:
            self.refused = reason
            log.error(
                "worker %s: the API refused its token (%s); stopping. Give it a valid token: a worker"
                " token (strategist token create --role worker) or your own, for your uploaded clusters.",
                self.config.name,
                reason,
            )
        self.stop()

    def _process(self, trial: ClaimedTrial) -> TrialProcess:
        """The trial process for this trial's domain: the current one, or a fresh one."""
        options = {"pool": self.config.pool, **self.config.trial_options}
        if trial.model_factory and self.config.pool == "gpu":  # the user's own module (factory_trial)
            options["model_factory"] = trial.model_factory
        key = session_key(trial.model, trial.cluster, options)
        proc = self._proc
        if proc is not None and (proc.key != key or not proc.alive):
            proc.close()
            proc = None
        if proc is None:
            proc = self._proc = TrialProcess(trial.model, trial.cluster, options)
        return proc

    def close_idle(self) -> None:
        """End the trial process (and its emulated cluster) after ``session_idle_s`` without trials."""
        proc = self._proc
        idle = proc is not None and time.monotonic() - proc.last_used > self.config.session_idle_s
        if proc is not None and idle and self._busy.acquire(blocking=False):
            try:
                proc.close()
                self._proc = None
            finally:
                self._busy.release()

    def shutdown(self) -> None:
        """Stop serving and end the trial process."""
        self.stop()
        with self._busy:
            if self._proc is not None:
                self._proc.close()
                self._proc = None

    def _run(self, trial: ClaimedTrial) -> None:
        log.info("worker %s: running trial %s on %s", self.config.name, trial.id, trial.cluster.name)
        proc = self._process(trial)
        stop = threading.Event()
        verdict: dict[str, bool] = {"cancel": False, "lost": False, "release": False}
        with self._drain_lock:
            self._running = (proc, verdict)
        if self._draining.is_set():  # the stop came between the claim and here
            self._stop_running()
        beat = threading.Thread(
            target=self._heartbeat, args=(trial, proc, stop, verdict), name=f"heartbeat-{trial.id}"
        )
        beat.start()
        try:
            measurement = proc.run(trial.id, trial.strategy, self.config.trial_timeout_s, trial.attempt)
        finally:
            stop.set()
            beat.join()
            with self._drain_lock:
                self._running = None
                killer, self._killer = self._killer, None
            if killer is not None:
                killer.join()  # the trial's processes have ended (SIGKILL after the grace)
        if verdict["release"] and not verdict["lost"]:
            reason = self._drain_reason
            released = self.api.release(trial, reason)
            self.released += int(released)
            log.info("worker: trial %s handed back (%s; released=%s)", trial.id, reason, released)
            return
        if verdict["lost"]:
            log.info(
                "worker: trial %s is no longer ours (stale claim or refused token); not reported", trial.id
            )
            return
        if verdict["cancel"]:
            # Reporting ends the trial as 'cancelled' at once instead of at the next stale sweep.
            measurement = Measurement(failure="stopped: the search was cancelled")
        accepted = self.api.report(trial, measurement)
        log.info("worker: trial %s reported (accepted=%s, ok=%s)", trial.id, accepted, measurement.ok)

    def _heartbeat(
        self, trial: ClaimedTrial, proc: TrialProcess, stop: threading.Event, verdict: dict[str, bool]
    ) -> None:
        while not stop.wait(self.config.heartbeat_s):
            try:
                reply = self.api.heartbeat(trial)
            except TokenRefused as e:  # revoked mid-trial: its result could never be reported
                self.refuse(str(e))
                verdict["lost"] = True
                proc.kill()
                return
            except Exception as e:  # a missed beat is retried; the stale timeout is several beats long
                log.warning("heartbeat of %s failed: %s", trial.id, e)
                continue
            if reply.cancel or reply.lost:
                verdict["cancel"], verdict["lost"] = reply.cancel, reply.lost
                proc.kill()
                return


def wait_for_api(api_url: str, timeout_s: float = 60.0) -> None:
    """Block until the API answers /healthz (a worker started beside the API waits for it)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(api_url.rstrip("/") + "/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the API at {api_url} did not answer /healthz within {timeout_s:.0f} s")
        time.sleep(0.3)
