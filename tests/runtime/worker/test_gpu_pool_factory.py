"""gpu-pool factory trials (issue 41): a ``gpu`` pool worker (``runtime.worker.runner.Worker``) claims
the trials of a search that names a model factory through the API and trains the user's own module
(a small transformer with tied embeddings, ``tests.runtime.agent.factory_models``) with the plan
applied, launched by torchrun on its one node as the agents launch it; the record says real
cluster, pool gpu, torchrun run id; trained parameters equal single-process SGD.

This host has no CUDA GPU: the worker's pool is 'gpu' with ``backend: gloo`` in its trial options
(the pool's default is nccl), so every line of the gpu pool's path runs except the CUDA device. A
real-GPU run of the same path is ``-m gpu`` in ``test_a_gpu_pool_worker_trains_the_factory_on_cuda``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import uvicorn
from sqlalchemy import select

from runtime.executor.reference import GPU
from runtime.executor.user_model import factory_spec, reference_sgd
from runtime.worker import WorkerConfig
from runtime.worker.api import ApiClient
from runtime.worker.runner import Worker
from search.baselines import baseline_strategy
from service.db import repository as repo
from service.db.engine import make_engine, session_factory, upgrade
from service.db.models import MeasurementRow, RuntimeRecordRow, TrialRow
from service.settings import Settings
from simulator.spec import ClusterSpec, Node

FACTORY = "tests.runtime.agent.factory_models:tiny_lm"
STEPS, LR, SEED, BATCH = 3, 0.05, 3, 4


def one_node(gpus: int = 2) -> ClusterSpec:
    return ClusterSpec(name="gpu-host", device_types=(GPU,), nodes=(Node(name="h0", device=GPU.name, gpus=gpus, nic_gbps=10.0),),
                       intra_node_gbps=100.0)  # fmt: skip


@pytest.fixture
def api(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The API on loopback (uvicorn in a thread) with a sqlite database; alice's token."""
    from service.api.app import create_app

    url = f"sqlite:///{tmp_path / 'api.db'}"
    upgrade(url)
    settings = Settings(data_dir=tmp_path / "data", database_url=url, broker_url="memory://",
                        heartbeat_timeout_s=30.0, migrate_on_start=False)  # fmt: skip
    sessions = session_factory(make_engine(url))
    with sessions() as s:
        alice = repo.create_token(s, name="alice", role="user")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.1)
    yield {"url": f"http://127.0.0.1:{port}", "sessions": sessions, "token": alice.secret,
           "user": alice.info.user_id}  # fmt: skip
    server.should_exit = True


def _search(api: dict[str, Any], factory: str, names: tuple[str, ...]) -> tuple[Any, dict[str, int]]:
    """alice's search on her one-node cluster naming ``factory``, one queued trial per baseline."""
    model, cluster = factory_spec(FACTORY, BATCH), one_node()
    with api["sessions"]() as s:
        m, c = (
            repo.store_spec(s, spec=model, owner_id=api["user"]),
            repo.store_spec(s, spec=cluster, owner_id=api["user"]),
        )
        search = repo.create_search(s, owner_id=api["user"], model=m, cluster=c, model_factory=factory)
        ids = {n: repo.enqueue_trial(s, search_id=search.id, baseline=n,
                                     strategy=baseline_strategy(n, model, cluster).model_dump(mode="json")).id
               for n in names}  # fmt: skip
    return model, ids


def _worker(api: dict[str, Any], options: dict[str, Any]) -> Worker:
    cfg = WorkerConfig(api_url=api["url"], token=api["token"], pool="gpu", clusters=("gpu-host",),
                       heartbeat_s=0.5, trial_timeout_s=300, trial_options=options)  # fmt: skip
    worker = Worker(cfg, ApiClient(api["url"], api["token"], worker_name="gpu-host-1"))
    worker.profile_jobs = None  # no profile jobs here: only the trials
    return worker


def test_a_gpu_pool_worker_trains_the_searchs_own_module(api: dict[str, Any], tmp_path: Path) -> None:
    dump = tmp_path / "params"
    dump.mkdir()
    options = {"backend": "gloo", "warmup": 0, "iterations": STEPS, "lr": LR, "seed": SEED, "timeout_s": 60,
               "param_dump_dir": str(dump)}  # fmt: skip
    model, ids = _search(api, FACTORY, ("horovod@64MiB", "ps-naive"))
    worker = _worker(api, options)
    try:
        assert worker.run_once() and worker.run_once()
    finally:
        worker.shutdown()
    want = reference_sgd(FACTORY, model, 2, STEPS, LR, SEED, BATCH)
    with api["sessions"]() as s, s.begin():
        for name, tid in ids.items():
            row = s.get_one(TrialRow, tid)
            m = s.scalars(select(MeasurementRow).where(MeasurementRow.trial_id == tid)).one()
            assert row.state == "succeeded", (name, m.failure)
            for r in range(2):  # the numbers first: a worker that ignores the factory fails here
                got = torch.load(dump / f"trial{tid}_rank{r}.pt")
                assert set(got) == set(want), (name, sorted(got))
                for var, t in got.items():
                    assert torch.allclose(t, want[var], rtol=1e-4, atol=1e-6), (name, r, var)
            env = m.body["environment"]
            run_id = f"trial{tid}-{row.attempt}"
            assert env["launcher"] == "torchrun" and env["torchrun_run_id"] == run_id, env
            assert env["model_factory"] == FACTORY and env["pool"] == "gpu"
            assert env["peak_memory"] == "rss_high_water" and 50e6 < env["peak_memory_bytes"] < 8e9
            assert len(m.iteration_times) == STEPS and all(t > 0 for t in m.iteration_times)
            rec = s.scalars(select(RuntimeRecordRow).where(RuntimeRecordRow.trial_id == tid)).one()
            assert rec.measured_on == {"site": "cluster", "pool": "gpu", "gpu_types": [GPU.name],
                                       "torchrun_run_id": run_id}  # fmt: skip
            print(f"\ngpu-pool factory trial {name}: iteration times"
                  f"  {[round(t * 1e3, 1) for t in m.iteration_times]} ms,"
                  f" peak RSS {env['peak_memory_bytes'] / 1e6:.0f} MB, run id {run_id}")  # fmt: skip


def test_a_factory_that_is_not_the_searchs_model_fails_naming_the_variable(api: dict[str, Any]) -> None:
    options = {"backend": "gloo", "warmup": 0, "iterations": 2, "timeout_s": 60}
    _, ids = _search(api, FACTORY.replace("tiny_lm", "tiny_lm_untied"), ("horovod@64MiB",))
    worker = _worker(api, options)
    try:
        assert worker.run_once()
    finally:
        worker.shutdown()
    with api["sessions"]() as s, s.begin():
        row = s.get_one(TrialRow, ids["horovod@64MiB"])
        assert row.state == "failed" and "head.weight" in str(row.failure_reason), row.failure_reason


@pytest.mark.gpu
def test_a_gpu_pool_worker_trains_the_factory_on_cuda(api: dict[str, Any]) -> None:
    """On a host with CUDA: the pool's own backend (nccl), peak memory from the CUDA allocator."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    options = {"warmup": 1, "iterations": 5, "timeout_s": 120}
    _, ids = _search(api, FACTORY, ("horovod@64MiB",))
    worker = _worker(api, options)
    try:
        assert worker.run_once()
    finally:
        worker.shutdown()
    with api["sessions"]() as s, s.begin():
        m = s.scalars(select(MeasurementRow).where(MeasurementRow.trial_id == ids["horovod@64MiB"])).one()
        assert m.failure is None, m.failure
        env = m.body["environment"]
        assert env["backend"] == "nccl" and env["peak_memory"] == "cuda_max_memory_allocated"
        print(
            f"\ncuda factory trial: {[round(t * 1e3, 2) for t in m.iteration_times]} ms, peak {env['peak_memory_bytes']}"
        )
