"""A draining worker hands a running *profile job* back too (issue 44, item 5): ``Worker.drain`` (what
SIGTERM, Ctrl-C and Celery's warm shutdown call) ends the job's measuring process and everything it
started, removes its temp folder, and releases the job (``POST /profiles/jobs/{id}/release``):
queued again at once, claimable by any worker; the old claim can no longer report.

The worker is a real ``Worker`` of the 'gpu' pool (its profile job is measured in a real child
process, on the CPU here) talking to the API's TestClient; a gpu-pool ``strategist worker`` process
cannot start on a host without CUDA, so the signal itself is covered by ``test_serve_drain``'s
worker tests, which call the same ``Worker.drain``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from runtime.worker import WorkerConfig
from runtime.worker.profile_jobs import ProfileJobClient
from runtime.worker.runner import Worker

API = "/api/v1"
PROFILER = "runtime.worker.profile_jobs"


class NoTrials:
    """The trials side of the API with nothing queued: the gpu worker turns to profile jobs."""

    def claim(self, **_: Any) -> None:
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def profilers() -> list[int]:
    """This test's profile processes (and anything they started), alive."""
    mine = descendants(os.getpid())
    return [p for p in mine if PROFILER in _cmdline(p)]


def _job(client: TestClient, tokens: dict[str, Any], job_id: int) -> dict[str, Any]:
    return dict(client.get(f"{API}/profiles/jobs/{job_id}", headers=tokens["alice"]).json())


def test_drain_ends_a_running_profile_job_and_hands_it_back(
    client: TestClient,
    tokens: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wait_for: Any,
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    # many timed runs: the measurement takes far longer than the drain needs to land mid-job
    r = client.post(
        f"{API}/profiles/jobs",
        json={"model": "tiny-mlp", "batch": 64, "repeats": 100},
        headers=tokens["alice"],
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    token = tokens["worker"]["Authorization"].removeprefix("Bearer ")
    config = WorkerConfig(api_url="http://testserver", token=token, pool="gpu", clusters=(), name="gpu-1")
    worker = Worker(config, api=NoTrials())  # type: ignore[arg-type]
    assert worker.profile_jobs is not None
    # the worker's own runner, talking to the TestClient
    worker.profile_jobs.client = ProfileJobClient("", token, worker_name="gpu-1", http=client)
    ran: list[bool] = []
    t = threading.Thread(target=lambda: ran.append(worker.run_once()), name="worker")
    t.start()
    try:
        # mid-job: the job is claimed and its measuring process is up (code that measures in the
        # worker's own process has none: the drain then lands while the job runs there)
        wait_for(lambda: _job(client, tokens, job_id)["state"] != "queued", 60, "the job claimed")
        end = time.monotonic() + 20
        while (
            not profilers() and time.monotonic() < end and _job(client, tokens, job_id)["state"] == "running"
        ):
            time.sleep(0.1)
        before, had = _job(client, tokens, job_id)["state"], profilers()
        t0 = time.monotonic()
        worker.drain("worker stopping (SIGTERM)")
        t.join(60)
        took = time.monotonic() - t0
    finally:
        worker.drain()
        t.join(120)
    after = _job(client, tokens, job_id)
    print(
        f"profile job drain: {took:.1f} s; job {before} -> {after['state']} worker {after['worker']}; "
        f"profile processes before {len(had)}, after {len(profilers())}"
    )
    assert not t.is_alive()
    assert (after["state"], after["worker"], after["profile_id"], after["error"]) == (
        "queued",
        None,
        None,
        None,
    )
    assert before == "running" and had, "the drain did not land mid-measurement"
    assert ran == [True] and worker.profile_jobs.released == 1 and worker.profile_jobs.jobs_run == 0
    assert took < 30
    assert profilers() == []
    assert sorted(p.name for p in tmp.iterdir()) == []
    # the old claim is gone: its late result is refused; another worker claims the job at once
    late = {"worker": "gpu-1", "error": "late"}
    url = f"{API}/profiles/jobs/{job_id}/result"
    assert client.post(url, json=late, headers=tokens["worker"]).status_code == 409
    r = client.post(f"{API}/profiles/jobs/claim", params={"worker": "gpu-2"}, headers=tokens["worker"])
    assert r.status_code == 200 and r.json()["id"] == job_id
    # a drained runner claims nothing more
    assert worker.run_once() is False


def test_release_is_for_the_running_worker_only(client: TestClient, tokens: dict[str, Any]) -> None:
    r = client.post(f"{API}/profiles/jobs", json={"model": "tiny-mlp", "batch": 2}, headers=tokens["alice"])
    job_id = r.json()["id"]
    url = f"{API}/profiles/jobs/{job_id}/release"
    w = tokens["worker"]
    # not running yet: nothing to hand back
    assert client.post(url, json={"worker": "w1"}, headers=w).json()["released"] is False
    assert client.post(f"{API}/profiles/jobs/claim", params={"worker": "w1"}, headers=w).status_code == 200
    other = client.post(url, json={"worker": "w2"}, headers=w).json()
    assert other["released"] is False and other["job"]["state"] == "running"
    assert client.post(url, json={"worker": "w1"}, headers=tokens["alice"]).status_code == 403
    assert client.post(url, json={"worker": "w1"}).status_code == 401
    assert (
        client.post(f"{API}/profiles/jobs/999/release", json={"worker": "w1"}, headers=w).status_code == 404
    )
    lone = b'{"worker": "w1", "reason": "\\udfff"}'  # a lone surrogate, as JSON escapes it
    bad = client.post(url, content=lone, headers={**w, "Content-Type": "application/json"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "reason"]
    mine = client.post(url, json={"worker": "w1", "reason": "SIGTERM"}, headers=w).json()
    assert mine["released"] is True and (mine["job"]["state"], mine["job"]["worker"]) == ("queued", None)
    assert client.post(url, json={"worker": "w1"}, headers=w).json()["released"] is False  # once
