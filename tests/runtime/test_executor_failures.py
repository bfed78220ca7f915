"""A failing trial is a Measurement with a reason, never an exception, and leaves no process behind."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from runtime.executor import ExecutorConfig, ExecutorSession, LocalLauncher, run_trial
from runtime.executor.reference import GPU, correctness_cases, linear, tiny_model
from runtime.executor.worker import layer_seconds
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    DeviceType,
    ModelSpec,
    Node,
    PSSync,
    Strategy,
    VariableStrategy,
)

MODEL = tiny_model()
# One node with two GPUs: three processes (two workers and a server), the cheapest to start.
CLUSTER = ClusterSpec(name="1x2", device_types=(GPU,), intra_node_gbps=100.0,
                      nodes=(Node(name="n0", device=GPU.name, gpus=2, nic_gbps=10.0),))  # fmt: skip
FAST = ExecutorConfig(compute="replay", warmup=1, iterations=2, timeout_s=30)


def allreduce(model: ModelSpec = MODEL) -> Strategy:
    return Strategy(
        variables=tuple(
            VariableStrategy(variable=v.name, shards=(CollectiveSync(),)) for v in model.variables
        )
    )


def pids(session: ExecutorSession) -> list[int]:
    return [p.popen.pid for p in session._procs]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_crashing_rank_is_a_failure_with_its_reason() -> None:
    cfg = ExecutorConfig(compute="replay", warmup=1, iterations=2, timeout_s=30, crash_rank=1)
    with ExecutorSession(MODEL, CLUSTER, LocalLauncher(), cfg) as s:
        s.start()
        before = pids(s)
        m = s.run(allreduce())
        assert m.failure is not None and "injected crash on rank 1" in m.failure, m.failure
        assert m.failure.startswith("rank 1 exited with code 1")
        assert not m.iteration_times
        assert all(gone(p) for p in before)
    assert all(gone(p) for p in before)


def test_timeout_is_a_failure_and_kills_everything() -> None:
    slow = ModelSpec(
        name="slow", batch_size=1, layers=(linear("l", 4, 4).model_copy(update={"fwd_flops": 1e15}),)
    )
    cfg = ExecutorConfig(compute="replay", warmup=0, iterations=1, timeout_s=2)
    with ExecutorSession(slow, CLUSTER, LocalLauncher(), cfg) as s:
        s.start()
        before = pids(s)
        m = s.run(allreduce(slow))  # one forward would sleep 1e15 / (10 TFLOPS * 0.5) = 200 s
        assert m.failure == "timeout: the trial took longer than 2 s"
        assert all(gone(p) for p in before)
        assert not s.alive


def test_invalid_and_unsupported_strategies_fail_without_starting() -> None:
    with ExecutorSession(MODEL, CLUSTER, LocalLauncher(), FAST) as s:
        bad_server = Strategy(
            variables=tuple(
                VariableStrategy(variable=v.name, shards=(PSSync(server="nowhere"),)) for v in MODEL.variables
            )
        )
        m = s.run(bad_server)
        assert m.failure is not None and m.failure.startswith("invalid strategy: variables.0.shards.0.server")
        stale = Strategy(
            variables=tuple(
                VariableStrategy(variable=v.name, shards=(PSSync(server="n0", staleness=2),))
                for v in MODEL.variables
            )
        )
        m = s.run(stale)
        assert m.failure is not None and m.failure.startswith("unsupported: ") and "staleness 2" in m.failure
        assert s.starts == 0


def test_estimated_out_of_memory_is_a_failure() -> None:
    small = DeviceType(name="tiny", fp32_tflops=1.0, fp16_tflops=1.0, memory_gb=1e-6, memory_bw_gbs=1.0)
    cluster = ClusterSpec(name="small", device_types=(small,), intra_node_gbps=10.0,
                          nodes=(Node(name="n0", device="tiny", gpus=2, nic_gbps=1.0),))  # fmt: skip
    m = run_trial(MODEL, cluster, allreduce(), LocalLauncher(), FAST)
    assert m.failure is not None and m.failure.startswith("out of memory (estimated)"), m.failure


def test_replayed_trials_then_a_killed_rank_is_replaced() -> None:
    # Layers of 1e10 FLOPs per batch on the toy GPU: ~15 ms of compute per step (the compute model,
    # replay's and the cost model's one function: 1.4 ms per pass at 0.7 of 10 TFLOPS).
    flops = 2e-3 * GPU.fp32_tflops * 1e12 * 0.5 / MODEL.batch_size
    model = MODEL.model_copy(
        update={"layers": tuple(layer.model_copy(update={"fwd_flops": flops}) for layer in MODEL.layers)}
    )
    compute = sum(f + b for f, b in layer_seconds(model, GPU, model.batch_size, 1.0))
    assert compute > 0.01
    cfg = ExecutorConfig(compute="replay", warmup=1, iterations=3, scale=4.0, timeout_s=30)
    cases = correctness_cases(model, "n0", "n0")
    with ExecutorSession(model, CLUSTER, LocalLauncher(), cfg) as s:
        for name in ("mixed", "ps-local-replication", "powersgd"):
            m = s.run(cases[name][0])
            assert m.ok, m.failure
            assert len(m.iteration_times) == len(m.compute_times) == len(m.sync_wait_times) == 3
            # Replay sleeps until deadlines: compute never takes less than the FLOPs say.
            assert min(m.compute_times) >= compute * 0.999
            assert min(m.sync_wait_times) >= 0.0
            assert m.environment["iterations_s"] >= 4 * compute
            assert m.scale == 4.0 and m.compute_mode == "replay"
        victim = s._procs[1].popen
        victim.kill()
        victim.wait()
        m = s.run(allreduce(model))
        assert m.ok, m.failure
        assert s.starts == 2


class BrokenLauncher(LocalLauncher):
    """Starts something that dies at once instead of the worker."""

    def spawn(
        self, node: int, argv: Sequence[str], env: Mapping[str, str], **kw: Any
    ) -> subprocess.Popen[bytes]:
        return super().spawn(
            node,
            [sys.executable, "-c", "import sys; print('no GPU here', file=sys.stderr); sys.exit(3)"],
            env,
            **kw,
        )


def test_start_up_failure_is_a_failure() -> None:
    m = run_trial(MODEL, CLUSTER, allreduce(), BrokenLauncher(), FAST)
    assert m.failure is not None and "exited with code 3: no GPU here" in m.failure, m.failure


@pytest.mark.parametrize("bad", [{"iterations": 0}, {"scale": 0.5}, {"compute": "fast"}])
def test_config_rejects_bad_fields(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=f"ExecutorConfig.{next(iter(bad))}"):
        ExecutorConfig(**bad)
