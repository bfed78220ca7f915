"""The correctness proof again with NCCL carrying the collectives (opt in: ``-m gpu``; needs CUDA).

Run on a GPU machine with ``python -m pytest -m gpu tests/runtime/test_executor_gpu.py``. The
cluster adapts to the GPUs present: NCCL refuses two ranks on one GPU, so with one GPU the check
is 1 worker + 1 server (collectives degenerate to one rank, but the CUDA tensors, the NCCL
subgroups, the device-to-CPU PS path and the real model on the GPU are all exercised); with two or
more GPUs it is 2 nodes x (GPUs // 2, at most 2) workers and every collective crosses ranks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from runtime.executor import ExecutorConfig, ExecutorSession, LocalLauncher
from runtime.executor.reference import (
    GPU,
    correctness_cases,
    reference_powersgd,
    reference_sgd,
    replica_deviation,
    tiny_model,
)
from simulator.spec import ClusterSpec, Node

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

STEPS = 3
LR = 0.1
SEED = 5
MODEL = tiny_model()
# GPU float32 sums in another order than the CPU reference: a little more room than on CPU.
TOLERANCE = {"sgd": (1e-4, 1e-5), "fp16": (2e-3, 2e-4), "powersgd": (1e-3, 1e-4)}


def gpu_cluster() -> ClusterSpec:
    n = torch.cuda.device_count()
    nodes, per_node = (1, 1) if n < 2 else (2, min(2, n // 2))
    return ClusterSpec(
        name=f"gpu-{nodes}x{per_node}",
        device_types=(GPU,),
        intra_node_gbps=100.0,
        nodes=tuple(Node(name=f"n{i}", device=GPU.name, gpus=per_node, nic_gbps=10.0) for i in range(nodes)),
    )


CLUSTER = gpu_cluster() if torch.cuda.is_available() else None


@pytest.fixture(scope="module")
def dump_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gpu-params")


@pytest.fixture(scope="module")
def session(dump_dir: Path) -> Iterator[ExecutorSession]:
    assert CLUSTER is not None
    cfg = ExecutorConfig(compute="real", backend="nccl", warmup=0, iterations=STEPS, lr=LR, seed=SEED,
                         timeout_s=120, startup_timeout_s=300, param_dump_dir=str(dump_dir))  # fmt: skip
    with ExecutorSession(MODEL, CLUSTER, LocalLauncher(), cfg) as s:
        yield s


@pytest.mark.parametrize("name", list(correctness_cases(MODEL, "n0", "n0")))
def test_nccl_case_matches_its_reference(session: ExecutorSession, dump_dir: Path, name: str) -> None:
    assert CLUSTER is not None
    servers = [n.name for n in CLUSTER.nodes]
    strategy, compare = correctness_cases(MODEL, servers[0], servers[-1])[name]
    result = session.run_detailed(strategy)
    m = result.measurement
    assert m.failure is None, m.failure
    assert m.backend == "nccl"
    replicas = [torch.load(dump_dir / f"trial{result.trial}_rank{r}.pt") for r in range(CLUSTER.num_gpus)]
    workers = CLUSTER.num_gpus
    if compare == "powersgd":
        want = reference_powersgd(MODEL, CLUSTER, strategy, STEPS, LR, SEED, MODEL.batch_size)
    else:
        want = reference_sgd(MODEL, workers, STEPS, LR, SEED, MODEL.batch_size)
    replica_deviation(replicas, want, reference_sgd(MODEL, workers, 0, LR, SEED, MODEL.batch_size))
    rtol, atol = TOLERANCE[compare]
    for var, t in replicas[0].items():
        assert torch.allclose(t, want[var], rtol=rtol, atol=atol), var


def test_nccl_replay_trial_runs() -> None:
    assert CLUSTER is not None
    strategy, _ = correctness_cases(MODEL, CLUSTER.nodes[0].name, CLUSTER.nodes[-1].name)["mixed"]
    cfg = ExecutorConfig(
        compute="replay", backend="nccl", warmup=1, iterations=3, scale=2.0, startup_timeout_s=300
    )
    with ExecutorSession(MODEL, CLUSTER, LocalLauncher(), cfg) as s:
        m = s.run(strategy)
    assert m.ok, m.failure
    assert len(m.iteration_times) == 3
