"""Profile jobs on a GPU-pool worker: claim one from the API, measure it, report the Profile (issue 15).

A job names a model (its spec, frozen when queued), a batch, a dtype and optionally the DeviceType
name to key the profile by. The worker runs what ``strategist profile`` runs
(``simulator.profile.profile_model``: per-layer replicas, scaled to the model's real
implementation where it imports here) on CUDA when the host has a GPU, else on the CPU (tests,
and a CPU "gpu" pool is still a measurement of that host), and reports the Profile or the error.

Contract: a job runs only after this worker claimed it; the API refuses a result from a worker
whose claim it no longer holds (409), so a job stores at most one profile. One job at a time.
The measurement runs in a child process (``python -m runtime.worker.profile_jobs``: its own
session, SIGTERM when the worker dies, a private TMPDIR removed when it ends), so a normal stop of
the worker (``ProfileJobRunner.drain``, from ``Worker.drain``) ends it -- SIGTERM to it, its group
and every descendant, SIGKILL after the grace -- and hands the job back
(``POST /profiles/jobs/{id}/release``): queued again at once for any worker.
Imports flow one way: nothing here imports ``service``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import TYPE_CHECKING

import httpx

from runtime.worker.api import API_PREFIX, _check
from runtime.worker.session import descendants, end_processes, term_with_parent
from simulator.spec.profile import Profile, ProfileJob, ProfileJobResult

if TYPE_CHECKING:  # torch is imported when a job runs: the worker's own process stays light
    import torch

log = logging.getLogger("strategist.worker")


def local_device() -> tuple[torch.device, str]:
    """CUDA device 0 and its name when the host has one, else the CPU and 'cpu'."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", 0), torch.cuda.get_device_name(0)
    return torch.device("cpu"), "cpu"


def run_profile_job(
    job: ProfileJob, device: torch.device | None = None, device_name: str | None = None
) -> Profile:
    """Measure ``job`` on ``device`` (default ``local_device``); the profile is keyed by the job's
    device name, else ``device_name``, else the local device's name."""
    from simulator.profile import profile_model, reference_module

    local, local_name = local_device()
    dev = device or local
    module = reference_module(job.spec.name, job.batch, dev, job.spec)
    return profile_model(
        job.spec,
        device_name=job.device or device_name or local_name,
        batch=job.batch,
        device=dev,
        dtype=job.dtype,
        repeats=job.repeats,
        module=module,
        note=f"profile job {job.id}",
    )


class ProfileJobClient:
    """The worker's calls of the profile-job endpoints, with its worker token.

    ``http``: an httpx client already pointing at the service (tests pass the API's TestClient);
    by default one for ``base_url``.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        worker_name: str,
        http: httpx.Client | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.worker_name = worker_name
        self._http = http or httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s)
        self._headers = {"Authorization": f"Bearer {token}"}

    def claim(self) -> ProfileJob | None:
        """The oldest queued profile job, now this worker's; None when there is none."""
        r = self._http.post(
            f"{API_PREFIX}/profiles/jobs/claim", params={"worker": self.worker_name}, headers=self._headers
        )
        if r.status_code == 204:
            return None
        _check(r, "claim a profile job")
        return ProfileJob.model_validate_json(r.content)

    def report(self, job: ProfileJob, profile: Profile | None, error: str | None = None) -> bool:
        """Report the job's profile or error; False when the API no longer counts it ours (409/404)."""
        body = ProfileJobResult(worker=self.worker_name, profile=profile, error=error)
        r = self._http.post(
            f"{API_PREFIX}/profiles/jobs/{job.id}/result",
            json=body.model_dump(mode="json", exclude_none=True),
            headers=self._headers,
        )
        if r.status_code in (404, 409):
            return False
        _check(r, "report a profile job")
        return True

    def release(self, job: ProfileJob, reason: str = "") -> bool:
        """Hand the running job back (this worker is stopping): queued again at once; False when
        the API no longer counts it ours."""
        r = self._http.post(
            f"{API_PREFIX}/profiles/jobs/{job.id}/release",
            json={"worker": self.worker_name, "reason": reason[:200]},
            headers=self._headers,
        )
        if r.status_code in (404, 409):
            return False
        _check(r, "release a profile job")
        return bool(r.json().get("released"))


#: Prefix of a profile process's private temp folder (its TMPDIR), removed when the process ends.
PROFILE_TMP_PREFIX = "strategist-profile-"


class ProfileProcess:
    """One job measured by ``python -m runtime.worker.profile_jobs`` (see the module doc).

    ``result`` waits for it; ``kill`` (from another thread) ends it and everything it started.
    """

    def __init__(self, job: ProfileJob, device: str | None = None) -> None:
        self.tmp = tempfile.mkdtemp(prefix=PROFILE_TMP_PREFIX)
        self.killed = threading.Event()
        argv = [sys.executable, "-m", "runtime.worker.profile_jobs"]
        self.child = subprocess.Popen(
            [*argv, device] if device else argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "TMPDIR": self.tmp},
            start_new_session=True,  # its own group: a drain ends everything it started
            preexec_fn=term_with_parent,
        )
        self._job = job.model_dump_json().encode()

    def result(self) -> tuple[Profile | None, str | None]:
        """Wait for the measurement: (profile, None), (None, why it failed), or (None, None) when
        ``kill`` stopped it."""
        out = b""
        assert self.child.stdin is not None and self.child.stdout is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.child.stdin.write(self._job)
            self.child.stdin.close()
        with contextlib.suppress(OSError, ValueError):
            out = self.child.stdout.read()
        code = self.child.wait()
        self.cleanup()
        if self.killed.is_set():
            return None, None  # stopped: no result and no failure of its own
        lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
        if not lines:
            return None, f"profile process exited with code {code} without a result"
        try:
            said = json.loads(lines[-1])
            if said.get("error") is not None:
                return None, str(said["error"])
            return Profile.model_validate(said["profile"]), None
        except (ValueError, KeyError, TypeError) as e:
            return None, f"profile process printed no valid result: {e}"[:2000]

    def kill(self, grace_s: float = 15.0) -> None:
        """SIGTERM to the process, its group and its descendants; SIGKILL after ``grace_s``."""
        self.killed.set()
        pids = descendants(self.child.pid) if self.child.poll() is None else []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child.pid, signal.SIGTERM)
        try:
            self.child.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, signal.SIGKILL)
            self.child.wait()
        end_processes(pids, grace_s)
        self.cleanup()

    def cleanup(self) -> None:
        """Remove the private temp folder (once the process has ended)."""
        if self.child.returncode is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


class ProfileJobRunner:
    """Claims and runs profile jobs one at a time for a 'gpu' pool worker.

    ``isolate`` (the worker's way): measure in a ``ProfileProcess``, which ``drain`` can end;
    False: in this process (tests that replace ``run_profile_job``); a drain then lets the job
    finish and report.
    """

    def __init__(
        self,
        client: ProfileJobClient,
        device: torch.device | None = None,
        *,
        isolate: bool = True,
        drain_grace_s: float = 15.0,
    ) -> None:
        self.client = client
        self.device = device
        self.isolate = isolate
        self.drain_grace_s = drain_grace_s
        self.jobs_run = 0
        self.released = 0
        # Reentrant: ``drain`` runs in a signal handler, maybe on the thread that holds it.
        self._lock = threading.RLock()
        self._proc: ProfileProcess | None = None
        self._killer: threading.Thread | None = None
        self._draining = threading.Event()
        self._reason = "worker stopping"

    def drain(self, reason: str = "worker stopping") -> None:
        """A normal stop: claim no more jobs; end the running job's process and hand the job back.

        Returns at once (safe in a signal handler); ``run_once`` waits for the process and releases."""
        self._reason = reason
        self._draining.set()
        self._stop_running()

    def _stop_running(self) -> None:
        with self._lock:
            if self._proc is None or self._killer is not None:
                return
            self._killer = threading.Thread(
                target=self._proc.kill, kwargs={"grace_s": self.drain_grace_s}, name="drain-profile"
            )
            self._killer.start()

    def run_once(self) -> bool:
        """Claim one job and run it to its report (or its release, on a drain); False when none
        was queued or the runner is draining."""
        if self._draining.is_set():
            return False
        job = self.client.claim()
        if job is None:
            return False
        log.info("worker %s: profiling %s at batch %d", self.client.worker_name, job.spec.name, job.batch)
        if self.isolate:
            profile, error = self._measure_isolated(job)
        else:
            profile, error = self._measure_here(job)
        if profile is None and error is None:  # stopped by a drain
            released = self.client.release(job, self._reason)
            self.released += int(released)
            log.info("worker: profile job %s handed back (%s; released=%s)", job.id, self._reason, released)
            return True
        if profile is None:
            log.warning("profile job %s failed: %s", job.id, error)
            accepted = self.client.report(job, None, (error or "failed without a reason")[:2000])
        else:
            accepted = self.client.report(job, profile)
        log.info("worker: profile job %s reported (accepted=%s)", job.id, accepted)
        self.jobs_run += 1
        return True

    def _measure_here(self, job: ProfileJob) -> tuple[Profile | None, str | None]:
        try:
            return run_profile_job(job, self.device), None
        except Exception as e:  # a failed measurement is the job's result, not the worker's death
            return None, f"{type(e).__name__}: {e}"

    def _measure_isolated(self, job: ProfileJob) -> tuple[Profile | None, str | None]:
        if self._draining.is_set():  # the stop came between the claim and here: nothing to end
            return None, None
        proc = ProfileProcess(job, str(self.device) if self.device is not None else None)
        with self._lock:
            self._proc = proc
        if self._draining.is_set():
            self._stop_running()
        try:
            return proc.result()
        finally:
            with self._lock:
                self._proc = None
                killer, self._killer = self._killer, None
            if killer is not None:
                killer.join()  # its processes have ended (SIGKILL after the grace)
            proc.cleanup()


def _main(argv: list[str]) -> None:
    """The profile process: read one ProfileJob (JSON) on stdin, print one line on stdout:
    ``{"profile": ...}`` or ``{"error": ...}``. ``argv[0]``: the torch device, if not the local one."""
    result = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else prints goes to stderr: stdout carries the one result line
    job = ProfileJob.model_validate_json(sys.stdin.buffer.read())
    device = None
    if argv:
        import torch

        device = torch.device(argv[0])
    try:
        said: dict[str, object] = {"profile": run_profile_job(job, device).model_dump(mode="json")}
    except Exception as e:  # the job's failure, reported as its result
        said = {"error": f"{type(e).__name__}: {e}"[:2000]}
    result.write(json.dumps(said) + "\n")
    result.flush()


__all__ = ["ProfileJobClient", "ProfileJobRunner", "ProfileProcess", "local_device", "run_profile_job"]

if __name__ == "__main__":
    _main(sys.argv[1:])
