"""Heterogeneous replay: each emulated GPU computes at its own type's speed and enforces its memory.

Runs on loopback (no namespaces needed); the shaped testbed is the same code with another launcher.
"""

from __future__ import annotations

import pytest

from runtime.hybrid.config import HybridConfig
from runtime.hybrid.layout import Layout, Route
from runtime.hybrid.testbed import measure_plan, pipeline_memory_failure
from simulator.analytical.compute import layer_times
from simulator.analytical.params import CostParams
from simulator.extract.zoo_clusters import P100, V100
from simulator.spec import ClusterSpec, HybridPlan, Layer, ModelSpec, Node, TaskGraph, Variable, VirtualDevice

CLUSTER = ClusterSpec(
    name="v100+p100",
    device_types=(V100, P100),
    nodes=(
        Node(name="v", device=V100.name, gpus=1, nic_gbps=50.0),
        Node(name="p", device=P100.name, gpus=1, nic_gbps=50.0),
    ),
    intra_node_gbps=100.0,
)


def model(activation_bytes: float, flops: float) -> ModelSpec:
    layers = tuple(
        Layer(
            name=f"l{i}",
            kind="linear",
            fwd_flops=flops,
            activation_bytes=activation_bytes,
            variables=(Variable(name=f"l{i}.w", shape=(256, 256)),),
        )
        for i in range(3)
    )
    return ModelSpec(name="big", batch_size=8, layers=layers)


def dp(shares: dict[str, int]) -> HybridPlan:
    tg = TaskGraph(first_layer=0, last_layer=3, degree=2, virtual_devices=(VirtualDevice(devices=("v:0", "p:0")),),
                   batch_shares=shares)  # fmt: skip
    return HybridPlan(task_graphs=(tg,), global_batch=sum(shares.values()))


def test_each_device_replays_its_own_type() -> None:
    m = model(1e6, 1e10)
    run = measure_plan(m, CLUSTER, dp({"v:0": 8, "p:0": 8}), iterations=3, warmup=1, testbed=False, scale=1.0)
    assert run.status == "ok", run.reason
    for dev, gpu in (("v:0", V100), ("p:0", P100)):
        want = layer_times(m, gpu, 8, CostParams()).step
        # Replayed compute is a sleep of the device type's time: never shorter than it, but on a
        # loaded host each sleep may end late (a 15 % band failed at load 16), so the upper bound
        # is loose; the type is told apart by the ratio below.
        assert 0.95 * want <= run.busy_s[dev] <= 2.0 * want + 0.02, dev
    assert run.busy_s["p:0"] > 1.2 * run.busy_s["v:0"]  # the P100 is slower (10.6 vs 15.7 TFLOPS)
    assert run.iteration_s is not None and run.iteration_s >= 0.9 * run.busy_s["p:0"]
    # parameters + gradients + Adam's two moments (measure_plan's default) + 8 samples' activations
    assert run.peak_memory_bytes["p:0"] == pytest.approx(4 * 256 * 256 * 4 * 3 + 8 * 3 * 1e6)


def test_a_plan_that_does_not_fit_fails_as_out_of_memory() -> None:
    # 1 GB of activations per sample and layer; 90 % usable: 6 samples (18 GB) overflow the P100's
    # 14.4 GB, 4 (12 GB) fit it and 8 (24 GB) fit the V100's 28.8 GB
    m = model(1e9, 1e8)
    even = measure_plan(
        m, CLUSTER, dp({"v:0": 6, "p:0": 6}), iterations=1, warmup=0, testbed=False, scale=1.0
    )
    assert even.status == "oom"
    assert "p:0 (P100-SXM2-16GB)" in even.reason and "task_graphs.0 activations (6 samples)" in even.reason
    balanced = measure_plan(
        m, CLUSTER, dp({"v:0": 8, "p:0": 4}), iterations=1, warmup=0, testbed=False, scale=1.0
    )
    assert balanced.status == "ok", balanced.reason
    assert balanced.peak_memory_bytes["v:0"] > 16e9  # holds more than the P100 could


def test_pipeline_memory_puts_the_stash_on_each_stage() -> None:
    m = model(1e9, 1e8)

    def pipe(first: str, second: str) -> HybridPlan:
        tgs = (
            TaskGraph(first_layer=0, last_layer=2, virtual_devices=(VirtualDevice(devices=(first,)),)),
            TaskGraph(first_layer=2, last_layer=3, virtual_devices=(VirtualDevice(devices=(second,)),)),
        )
        return HybridPlan(task_graphs=tgs, global_batch=8, num_micro_batches=8, schedule="gpipe")

    cfg = HybridConfig()
    # GPipe stashes all 8 micro-batches: stage 0 holds 8 x 2 GB = 16 GB + weights: too much for a P100
    reason = pipeline_memory_failure(m, CLUSTER, pipe("p:0", "v:0"), cfg)
    assert reason is not None and "p:0 (P100-SXM2-16GB)" in reason and "stage 0 activations" in reason
    assert pipeline_memory_failure(m, CLUSTER, pipe("v:0", "p:0"), cfg) is None  # larger memory first


def test_bridge_routes_cover_every_row_once() -> None:
    cluster = ClusterSpec(name="4", device_types=(V100,), nodes=(Node(name="n", device=V100.name, gpus=4, nic_gbps=1.0),),
                          intra_node_gbps=1.0)  # fmt: skip
    vd = lambda *i: VirtualDevice(devices=tuple(f"n:{j}" for j in i))  # noqa: E731
    plan = HybridPlan(
        task_graphs=(
            TaskGraph(first_layer=0, last_layer=1, degree=3, virtual_devices=(vd(0, 1, 2),),
                      batch_shares={"n:0": 1, "n:1": 4, "n:2": 1}),
            TaskGraph(first_layer=1, last_layer=3, primitive="split", degree=2, virtual_devices=(vd(1, 3),)),
        ),
        global_batch=6,
    )  # fmt: skip
    L = Layout(model(1.0, 1.0), cluster, plan)
    fwd = L.routes(0)
    # rank order is first use: n:0, n:1, n:2, n:3 -> 0..3; split devices n:1 (rank 1), n:3 (rank 3)
    assert sorted(fwd, key=lambda r: (r.dst, r.lo)) == [
        Route(0, 1, 0, 1), Route(1, 1, 1, 5), Route(2, 1, 5, 6),
        Route(0, 3, 0, 1), Route(1, 3, 1, 5), Route(2, 3, 5, 6),
    ]  # fmt: skip
    # backward: the split devices hold identical gradients; n:1 answers for itself and for the others
    assert sorted(L.routes(0, backward=True), key=lambda r: r.dst) == [
        Route(1, 0, 0, 1), Route(1, 1, 1, 5), Route(1, 2, 5, 6),
    ]  # fmt: skip


@pytest.mark.slow
def test_pipelined_plan_runs_on_the_pipeline_executor() -> None:
    m = model(1e6, 1e10)
    tgs = (
        TaskGraph(first_layer=0, last_layer=2, virtual_devices=(VirtualDevice(devices=("v:0",)),)),
        TaskGraph(first_layer=2, last_layer=3, virtual_devices=(VirtualDevice(devices=("p:0",)),)),
    )
    plan = HybridPlan(task_graphs=tgs, global_batch=8, num_micro_batches=4, schedule="1f1b")
    run = measure_plan(m, CLUSTER, plan, iterations=3, warmup=1, testbed=False, scale=1.0)
    assert run.status == "ok", run.reason
    assert set(run.busy_s) == {"v:0", "p:0"}
    # each stage replays at least its own device's compute for the 4 micro-batches of 2
    for dev, gpu, layers in (("v:0", V100, slice(0, 2)), ("p:0", P100, slice(2, 3))):
        t = layer_times(m, gpu, 2, CostParams())
        assert run.busy_s[dev] >= 0.95 * 4 * float(t.fwd[layers].sum() + t.bwd[layers].sum())


def _replay_worker(compute_dtype: str | None) -> object:
    """A replay Worker set up in-process (no process group: a replicate plan creates none in setup)."""
    from runtime.executor.config import ExecutorConfig
    from runtime.hybrid.worker import Worker

    m = model(1e6, 1e10)
    cfg = HybridConfig(ExecutorConfig(compute="replay", scale=4.0), compute_dtype=compute_dtype)  # type: ignore[arg-type]
    job = {"config": cfg.to_dict(), "model": m.model_dump(mode="json"),
           "cluster": CLUSTER.model_dump(mode="json"), "plan": dp({"v:0": 8, "p:0": 8}).model_dump(mode="json")}  # fmt: skip
    w = Worker(job, 0)  # rank 0 is v:0
    w.setup({})
    return w


def test_replay_uses_the_configured_compute_dtype_and_a_persistent_gradient_buffer() -> None:
    fp32, fp16 = _replay_worker(None), _replay_worker("float16")
    m = model(1e6, 1e10)
    for w, dtype in ((fp32, None), (fp16, "float16")):
        want = layer_times(m, V100, 8, CostParams(compute_dtype=dtype))  # type: ignore[arg-type]
        times = w.replay[0]  # type: ignore[attr-defined]
        assert times.fwd == pytest.approx(tuple(want.fwd)) and times.bwd == pytest.approx(tuple(want.bwd))
        # one DP bucket (3 x 256 KB < 25 MiB): the TaskGraph's fp32 gradient bytes / 4 / scale 4
        assert [(b.lo, b.hi) for b in w.buckets[0]] == [(0, 3)]  # type: ignore[attr-defined]
        numel = 3 * 256 * 256 // 4
        # allocated once in setup (outside every timed step) and reused by every all-reduce
        buf = w._buffers[("grads", 0, 0)]  # type: ignore[attr-defined]
        assert buf.numel() == numel
        assert buf is w._buffer(("grads", 0, 0), numel)  # type: ignore[attr-defined]
    assert sum(fp16.replay[0].fwd) < 0.5 * sum(fp32.replay[0].fwd)  # type: ignore[attr-defined]  # tensor cores


def test_replay_launches_each_bucket_when_its_layers_backward_is_done() -> None:
    """Overlap: bucket k's all-reduce starts before the backward of the layers below it.

    Three one-layer buckets (cap 256 KiB). Replay sleeps layer 2's backward, launches bucket 0,
    sleeps layer 1's, launches bucket 1, sleeps layer 0's, launches bucket 2: so bucket 0 starts at
    least the backward of layers 1 and 0 before the backward ends (sleeps only run long), bucket 2
    at its end. Fused (``overlap_sync=False``): nothing is launched during the backward.
    """
    from runtime.executor import LocalLauncher
    from runtime.executor.config import ExecutorConfig
    from runtime.hybrid.run import run_hybrid

    m = model(1e6, 3e10)
    plan = dp({"v:0": 8, "p:0": 8})
    for overlap in (True, False):
        cfg = HybridConfig(ExecutorConfig(compute="replay", warmup=1, iterations=2, scale=1.0),
                           overlap_sync=overlap, bucket_bytes=256 * 1024)  # fmt: skip
        run = run_hybrid(m, CLUSTER, plan, LocalLauncher(), cfg)
        assert run.status == "ok", run.reason
        for rec in run.records.values():
            gpu = V100 if rec["device"] == "v:0" else P100
            bwd = layer_times(m, gpu, 8, CostParams()).bwd
            for offsets in rec["bucket_launch_s"]:
                if not overlap:
                    assert offsets == []
                    continue
                assert len(offsets) == 3
                assert offsets[0] <= -0.99 * float(bwd[0] + bwd[1])
                assert offsets[1] <= -0.99 * float(bwd[0])
                assert offsets == sorted(offsets)


def test_hybrid_config_rejects_an_unknown_compute_dtype() -> None:
    with pytest.raises(ValueError, match="compute_dtype"):
        HybridConfig(compute_dtype="int8")  # type: ignore[arg-type]
