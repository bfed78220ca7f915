"""Profile jobs: a user queues one, a 'gpu' pool worker claims, measures (CPU here) and reports it;
the stored profile is then what the cost model uses; bad results get 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from runtime.worker import WorkerConfig
from runtime.worker.profile_jobs import ProfileJobClient, ProfileJobRunner
from runtime.worker.runner import Worker

API = "/api/v1"


def _runner(
    client: TestClient, tokens: dict[str, Any], name: str = "gpu-worker", *, isolate: bool = True
) -> ProfileJobRunner:
    token = tokens["worker"]["Authorization"].removeprefix("Bearer ")
    return ProfileJobRunner(ProfileJobClient("", token, worker_name=name, http=client), isolate=isolate)


def _upload(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    for kind in ("models", "clusters"):
        spec = specs.model() if kind == "models" else specs.cluster()
        assert client.post(f"{API}/{kind}", json=spec, headers=tokens["alice"]).status_code == 201


def test_a_queued_job_is_measured_stored_and_used(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    _upload(client, tokens, specs)
    # Keyed by the cluster's device type and the model's batch: the cost model's key for it.
    job = {"model": "tiny-mlp", "batch": 8, "device": "T4", "repeats": 1}
    r = client.post(f"{API}/profiles/jobs", json=job, headers=tokens["alice"])
    assert r.status_code == 201, r.text
    queued = r.json()
    assert (queued["state"], queued["model"], queued["device"], queued["profile_id"]) == (
        "queued",
        "tiny-mlp",
        "T4",
        None,
    )
    runner = _runner(client, tokens)
    assert runner.run_once() is True
    assert runner.run_once() is False  # nothing left
    done = client.get(f"{API}/profiles/jobs/{queued['id']}", headers=tokens["alice"]).json()
    assert (done["state"], done["worker"], done["error"]) == ("done", "gpu-worker", None)
    prof = client.get(f"{API}/profiles/{done['profile_id']}", headers=tokens["alice"]).json()
    assert (prof["model"], prof["device"], prof["batch"], prof["layers"]) == ("tiny-mlp", "T4", 8, 2)
    assert "profile job" in prof["source"]
    compute = client.get(
        f"{API}/profiles/compute",
        params={"model": "tiny-mlp", "cluster": "two-node"},
        headers=tokens["alice"],
    ).json()
    assert compute["compute_source"] == "profile" and compute["t_comp"] == pytest.approx(prof["step_s"])


def test_a_failed_measurement_fails_the_job_with_its_reason(
    client: TestClient, tokens: dict[str, Any], specs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _upload(client, tokens, specs)
    r = client.post(f"{API}/profiles/jobs", json={"model": "tiny-mlp", "batch": 2}, headers=tokens["alice"])

    def boom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr("runtime.worker.profile_jobs.run_profile_job", boom)
    assert _runner(client, tokens, isolate=False).run_once() is True  # boom is in this process
    job = client.get(f"{API}/profiles/jobs/{r.json()['id']}", headers=tokens["alice"]).json()
    assert job["state"] == "failed" and job["error"] == "RuntimeError: CUDA out of memory"
    assert job["profile_id"] is None


def _claimed(client: TestClient, tokens: dict[str, Any], specs: Any, worker: str = "w1") -> dict[str, Any]:
    _upload(client, tokens, specs)
    client.post(f"{API}/profiles/jobs", json={"model": "tiny-mlp", "batch": 2}, headers=tokens["alice"])
    r = client.post(f"{API}/profiles/jobs/claim", params={"worker": worker}, headers=tokens["worker"])
    assert r.status_code == 200, r.text
    return dict(r.json())


def _profile(**fwd: Any) -> dict[str, Any]:
    return {
        "model": "tiny-mlp",
        "device": "cpu",
        "dtype": "float32",
        "batch": 2,
        "layers": [{"name": "fc1", "fwd_s": 0.001, "bwd_s": 0.002, **fwd}],
    }


def test_a_bad_result_is_a_422_naming_the_field(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    job = _claimed(client, tokens, specs)
    url = f"{API}/profiles/jobs/{job['id']}/result"
    r = client.post(url, json={"worker": "w1", "profile": _profile(fwd_s=-1.0)}, headers=tokens["worker"])
    assert r.status_code == 422
    assert [e["loc"] for e in r.json()["detail"]] == [["body", "profile", "layers", 0, "fwd_s"]]
    r = client.post(url, json={"worker": "w1"}, headers=tokens["worker"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "profile"]
    # Still running: a good result from the claiming worker is stored once; a second one is refused.
    good = {"worker": "w1", "profile": _profile()}
    assert client.post(url, json=good, headers=tokens["worker"]).status_code == 200
    assert client.post(url, json=good, headers=tokens["worker"]).status_code == 409


def test_only_the_claiming_worker_reports_and_only_for_the_jobs_key(
    client: TestClient, tokens: dict[str, Any], specs: Any
) -> None:
    job = _claimed(client, tokens, specs, worker="w1")
    url = f"{API}/profiles/jobs/{job['id']}/result"
    assert (
        client.post(url, json={"worker": "w2", "profile": _profile()}, headers=tokens["worker"]).status_code
        == 409
    )
    other = {**_profile(), "batch": 4}
    assert (
        client.post(url, json={"worker": "w1", "profile": other}, headers=tokens["worker"]).status_code == 409
    )
    assert (
        client.post(url, json={"worker": "w1", "error": "no GPU"}, headers=tokens["worker"]).json()["state"]
        == "failed"
    )


def test_roles_and_bad_requests(client: TestClient, tokens: dict[str, Any], specs: Any) -> None:
    _upload(client, tokens, specs)
    assert (
        client.post(
            f"{API}/profiles/jobs", json={"model": "tiny-mlp", "batch": 2}, headers=tokens["worker"]
        ).status_code
        == 403
    )
    assert (
        client.post(f"{API}/profiles/jobs/claim", params={"worker": "u"}, headers=tokens["alice"]).status_code
        == 403
    )
    assert (
        client.post(
            f"{API}/profiles/jobs/claim", params={"worker": "w"}, headers=tokens["worker"]
        ).status_code
        == 204
    )
    r = client.post(f"{API}/profiles/jobs", json={"model": "tiny-mlp", "batch": 0}, headers=tokens["alice"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "batch"]
    r = client.post(
        f"{API}/profiles/jobs", json={"model": "no-such-model", "batch": 2}, headers=tokens["alice"]
    )
    assert r.status_code == 404
    assert client.get(f"{API}/profiles/jobs/999", headers=tokens["alice"]).status_code == 404


def test_only_a_gpu_pool_worker_runs_profile_jobs() -> None:
    gpu = Worker(WorkerConfig(api_url="http://127.0.0.1:9", token="t", pool="gpu", clusters=()))
    testbed = Worker(WorkerConfig(api_url="http://127.0.0.1:9", token="t", pool="testbed", clusters=()))
    assert gpu.profile_jobs is not None and testbed.profile_jobs is None
