"""Hybrid cost model: hand-worked steps, agreement with the pipeline cost model, monotonicity."""

from __future__ import annotations

import pytest

from simulator.analytical.compute import OpEfficiency
from simulator.analytical.params import CostParams
from simulator.hybrid import collective_seconds, grad_buckets, predict, shard_ops
from simulator.pipeline.cost import pipeline_length, prior_transfers
from simulator.spec import (
    GBPS,
    ClusterSpec,
    DeviceType,
    HybridPlan,
    Layer,
    ModelSpec,
    Node,
    TaskGraph,
    VirtualDevice,
)

# compute-bound roofline: no launch cost, no memory traffic, GEMMs at peak
PARAMS = CostParams(op_efficiency=OpEfficiency(gemm=1.0), phi=0.0, delta=0.0)


def chain(n: int = 4, flops: float = 1e12, act: float = 4e6, width: int = 1000) -> ModelSpec:
    from simulator.spec import Variable

    return ModelSpec(
        name="chain",
        batch_size=1,
        layers=tuple(
            Layer(
                name=f"l{i}",
                kind="linear",
                fwd_flops=flops,
                activation_bytes=act,
                fwd_bytes=0.0,
                fwd_kernels=0,
                variables=(Variable(name=f"w{i}", shape=(width, width)),),
                inputs=(f"l{i - 1}",) if i else (),
            )
            for i in range(n)
        ),
    )


def gpu(name: str, tflops: float, gb: float = 32) -> DeviceType:
    return DeviceType(
        name=name,
        fp32_tflops=tflops,
        fp16_tflops=tflops,
        memory_gb=gb,
        memory_bw_gbs=1e6,
        launch_overhead_us=0,
    )


def cluster(fast: float = 2.0, slow: float = 1.0, gbps: float = 8.0, per_node: int = 2) -> ClusterSpec:
    return ClusterSpec(
        name="het",
        device_types=(gpu("Fast", fast), gpu("Slow", slow)),
        nodes=(
            Node(name="f", device="Fast", gpus=per_node, nic_gbps=gbps),
            Node(name="s", device="Slow", gpus=per_node, nic_gbps=gbps),
        ),
        intra_node_gbps=100.0,
    )


def dp(model: ModelSpec, c: ClusterSpec, shares: dict[str, int]) -> HybridPlan:
    devs = tuple(shares)
    tg = TaskGraph(
        first_layer=0,
        last_layer=len(model.layers),
        degree=len(devs),
        virtual_devices=(VirtualDevice(devices=devs),),
        batch_shares=shares,
    )
    return HybridPlan(task_graphs=(tg,), global_batch=sum(shares.values()))


def test_data_parallel_step_is_the_slowest_device_then_the_all_reduce() -> None:
    model, c = chain(), cluster()
    plan = dp(model, c, {"f:0": 6, "s:0": 2})
    cost = predict(model, c, plan, PARAMS)
    # per sample: fwd 4 TFLOP, bwd 2·3 + 1 = 7 TFLOP (the first layer has no input gradient) -> 11 TFLOP
    assert cost.busy["f:0"] == pytest.approx(6 * 11 / 2)
    assert cost.busy["s:0"] == pytest.approx(2 * 11 / 1)
    # ring f:0 -> s:0 -> f:0 crosses the 8 Gbit/s NICs: 2·(1/2)·16 MB / 1 GB/s
    grads = 4 * 4e6
    assert cost.sync == pytest.approx(grads / (8 * GBPS))
    assert cost.seconds == pytest.approx(33.0 + grads / (8 * GBPS))
    even = predict(model, c, dp(model, c, {"f:0": 4, "s:0": 4}), PARAMS)
    assert even.seconds == pytest.approx(44.0 + grads / (8 * GBPS))


def test_measured_call_overhead_replaces_phi_and_delta() -> None:
    c = cluster()
    base = collective_seconds(c, ["f:0", "s:0"], "allreduce", 1e6, PARAMS)
    probed = collective_seconds(c, ["f:0", "s:0"], "allreduce", 1e6, CostParams(call_overhead_s=0.01))
    assert probed == pytest.approx(base + 0.01)
    assert collective_seconds(c, ["f:0"], "allreduce", 1e6, PARAMS) == 0.0


def test_measured_call_overhead_replaces_the_link_latency_too() -> None:
    # 100 us per hop: Eq. 3 adds 2(w-1) = 2 hops for an all-reduce of 2; a measured α contains them
    slow_links = cluster().model_copy(
        update={"nodes": tuple(n.model_copy(update={"latency_us": 100.0}) for n in cluster().nodes)}
    )
    transfer = collective_seconds(cluster(), ["f:0", "s:0"], "allreduce", 1e6, PARAMS)
    assert collective_seconds(slow_links, ["f:0", "s:0"], "allreduce", 1e6, PARAMS) == pytest.approx(
        transfer + 2 * 100e-6
    )
    probed = collective_seconds(
        slow_links, ["f:0", "s:0"], "allreduce", 1e6, CostParams(call_overhead_s=0.01)
    )
    assert probed == pytest.approx(transfer + 0.01)


def pipe(model: ModelSpec, devs: list[list[str]], cuts: list[int], batch: int, mb: int) -> HybridPlan:
    bounds = [0, *cuts, len(model.layers)]
    tgs = tuple(
        TaskGraph(
            first_layer=bounds[s],
            last_layer=bounds[s + 1],
            degree=1,
            virtual_devices=tuple(VirtualDevice(devices=(d,)) for d in devs[s]),
        )
        for s in range(len(devs))
    )
    return HybridPlan(
        task_graphs=tgs, nested_dp=len(devs[0]), global_batch=batch, num_micro_batches=batch // mb
    )


def test_one_pipeline_agrees_with_the_pipeline_cost_model() -> None:
    model, c = chain(8), cluster()
    plan = pipe(model, [["f:0"], ["f:1"], ["s:0"], ["s:1"]], [3, 5, 6], 8, 2)
    cost = predict(model, c, plan, PARAMS)
    pplan = plan.to_plan()
    fwd, bwd = [], []
    for st in pplan.stages:
        speed = 2.0 if st.devices[0].startswith("f") else 1.0
        n_layers = st.last_layer - st.first_layer
        fwd.append(n_layers * 2 * 1e12 / (speed * 1e12))
        bwd.append((2 * n_layers - (1 if st.first_layer == 0 else 0)) * 2 * 1e12 / (speed * 1e12))
    want = pipeline_length(pplan, fwd, bwd, prior_transfers(model, c, pplan))
    assert cost.seconds == pytest.approx(want)


def test_nested_replicas_wait_for_the_slowest_before_each_stage_all_reduce() -> None:
    model, c = chain(4), cluster()
    homo = pipe(model, [["f:0", "s:0"], ["f:1", "s:1"]], [2], 8, 2)
    cost = predict(model, c, homo, PARAMS)
    assert cost.replica_seconds[1] > cost.replica_seconds[0]  # the Slow replica
    assert cost.seconds >= max(cost.replica_seconds)
    assert cost.task_graphs[0].sync > 0


def test_pipelined_task_graphs_need_degree_one() -> None:
    model, c = chain(4), cluster()
    tg0 = TaskGraph(
        first_layer=0, last_layer=2, degree=2, virtual_devices=(VirtualDevice(devices=("f:0", "f:1")),)
    )
    tg1 = TaskGraph(
        first_layer=2, last_layer=4, degree=2, virtual_devices=(VirtualDevice(devices=("s:0", "s:1")),)
    )
    plan = HybridPlan(task_graphs=(tg0, tg1), global_batch=8, num_micro_batches=4)
    with pytest.raises(ValueError, match=r"task_graphs.0.degree"):
        predict(model, c, plan, PARAMS)


def test_split_shards_compute_and_adds_collectives() -> None:
    model, c = chain(4), cluster(per_node=2)
    assert [(o.kind, o.gather_after) for o in shard_ops(model, 0, 3)] == [
        ("col", False),
        ("row", False),
        ("col", True),
    ]
    whole = TaskGraph(
        first_layer=0, last_layer=4, degree=1, virtual_devices=(VirtualDevice(devices=("f:0",)),)
    )
    one = predict(model, c, HybridPlan(task_graphs=(whole,), global_batch=4), PARAMS)
    tg = TaskGraph(
        first_layer=0,
        last_layer=4,
        primitive="split",
        degree=2,
        virtual_devices=(VirtualDevice(devices=("f:0", "f:1")),),
    )
    two = predict(model, c, HybridPlan(task_graphs=(tg,), global_batch=4), PARAMS)
    assert two.busy["f:0"] == pytest.approx(one.busy["f:0"] / 2)
    comm = two.task_graphs[0].split_comm[0]
    # two row outputs all-reduced forward, one col input gradient all-reduced backward (the first
    # col reads the model input), each 16 MB over the 100 Gbit/s intra-node ring: 2·(1/2)·16e6 / 12.5e9
    assert comm == pytest.approx(3 * 16e6 / (100 * GBPS))
    uneven = tg.model_copy(update={"split_shares": (3, 1)})
    three = predict(model, c, HybridPlan(task_graphs=(uneven,), global_batch=4), PARAMS)
    assert three.busy["f:0"] == pytest.approx(one.busy["f:0"] * 3 / 4)


@pytest.mark.parametrize("gbps", [1.0, 4.0, 16.0, 64.0])
def test_more_bandwidth_never_costs_more(gbps: float) -> None:
    model = chain(4)
    plan = dp(model, cluster(), {"f:0": 4, "f:1": 4, "s:0": 2, "s:1": 2})
    slow = predict(model, cluster(gbps=gbps), plan, PARAMS).seconds
    fast = predict(model, cluster(gbps=gbps * 2), plan, PARAMS).seconds
    assert fast <= slow


def test_faster_devices_and_smaller_batches_never_cost_more() -> None:
    model = chain(4)
    plan = dp(model, cluster(), {"f:0": 4, "s:0": 4})
    base = predict(model, cluster(), plan, PARAMS).seconds
    assert predict(model, cluster(slow=1.5), plan, PARAMS).seconds < base
    assert predict(model, cluster(), dp(model, cluster(), {"f:0": 4, "s:0": 3}), PARAMS).seconds < base
    # moving samples from the slow to the fast device helps until the compute times cross
    steps = [
        predict(model, cluster(), dp(model, cluster(), {"f:0": 8 - s, "s:0": s}), PARAMS).seconds
        for s in range(4, 1, -1)
    ]
    assert steps == sorted(steps, reverse=True)


@pytest.mark.parametrize(("gbps", "want"), [(8.0, 33.0 + 0.004), (0.004, 50.0)])
def test_bucketed_all_reduce_overlaps_backward(gbps: float, want: float) -> None:
    """Hand-worked: one 4 MB bucket per layer, each ready when both devices finished its backward.

    f:0 (2 TFLOP/s, 6 rows): forward 4 x 3 s, backward 6 s per layer (3 s for layer 0): layers
    3, 2, 1, 0 are done at 18, 24, 30, 33 s; s:0 (1 TFLOP/s, 2 rows) at 12, 16, 20, 22 s. A bucket
    takes 2·(1/2)·4 MB / (gbps/8) GB/s: 0.004 s at 8 Gbit/s (only the last one, ready at 33 s,
    shows: 33.004 s) and 8 s at 4 Mbit/s (the channel: 18+8 = 26, 34, 42, 50 s).
    """
    model, c = chain(), cluster(gbps=gbps)
    plan = dp(model, c, {"f:0": 6, "s:0": 2})
    assert [(b.lo, b.hi) for b in grad_buckets(model, 0, 4, 4e6)] == [(3, 4), (2, 3), (1, 2), (0, 1)]
    cost = predict(model, c, plan, PARAMS, bucket_bytes=4e6)
    assert cost.seconds == pytest.approx(want)
    assert cost.exposed_sync == pytest.approx(want - 33.0)
    fused = predict(model, c, plan, PARAMS, overlap=False)
    assert fused.seconds == pytest.approx(33.0 + 16e6 / (gbps * GBPS))
    # one bucket (the default cap holds all 16 MB) is ready only at the end: the fused step
    assert predict(model, c, plan, PARAMS).seconds == pytest.approx(fused.seconds)


def test_grad_buckets_cover_every_variable_once_in_backward_order() -> None:
    model = chain(6)
    buckets = grad_buckets(model, 1, 6, 9e6)  # 4 MB per layer: three layers reach the cap
    assert [(b.lo, b.hi) for b in buckets] == [(3, 6), (1, 3)]
    assert sum(b.grad_bytes for b in buckets) == pytest.approx(5 * 4e6)
    with pytest.raises(ValueError, match="bucket_bytes"):
        grad_buckets(model, 0, 6, 0)
