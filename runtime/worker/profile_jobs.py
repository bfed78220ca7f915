"""Profile jobs on a GPU-pool worker: claim one from the API, measure it, report the Profile (issue 15).

A job names a model (its spec, frozen when queued), a batch, a dtype and optionally the DeviceType
name to key the profile by. The worker runs what ``strategist profile`` runs
(``simulator.profile.profile_model``: per-layer replicas, scaled to the model's real
implementation where it imports here) on CUDA when the host has a GPU, else on the CPU (tests,
and a CPU "gpu" pool is still a measurement of that host), and reports the Profile or the error.

Contract: a job runs only after this worker claimed it; the API refuses a result from a worker
whose claim it no longer holds (409), so a job stores at most one profile. One job at a time.
Imports flow one way: nothing here imports ``service``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import httpx

from runtime.worker.api import API_PREFIX, _check
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


class ProfileJobRunner:
    """Claims and runs profile jobs one at a time for a 'gpu' pool worker."""

    def __init__(self, client: ProfileJobClient, device: torch.device | None = None) -> None:
        self.client = client
        self.device = device
        self.jobs_run = 0

    def run_once(self) -> bool:
        """Claim one job and run it to its report; False when none was queued."""
        job = self.client.claim()
        if job is None:
            return False
        log.info("worker %s: profiling %s at batch %d", self.client.worker_name, job.spec.name, job.batch)
        try:
            profile = run_profile_job(job, self.device)
        except Exception as e:  # a failed measurement is the job's result, not the worker's death
            log.warning("profile job %s failed: %s", job.id, e)
            accepted = self.client.report(job, None, f"{type(e).__name__}: {e}"[:2000])
        else:
            accepted = self.client.report(job, profile)
        log.info("worker: profile job %s reported (accepted=%s)", job.id, accepted)
        self.jobs_run += 1
        return True


__all__ = ["ProfileJobClient", "ProfileJobRunner", "local_device", "run_profile_job"]
