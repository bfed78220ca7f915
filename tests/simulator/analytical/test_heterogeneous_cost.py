"""HeterPS cost model (Formulas 2-8): a worked example checked by hand, and the vectorised twin."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.analytical.heterogeneous import HeterogeneousCostModel, Workload
from simulator.spec import (
    ClusterSpec,
    DeviceType,
    Layer,
    ModelSpec,
    Node,
    ResourceLink,
    ResourcePlan,
    ResourceType,
    Variable,
)
from simulator.spec.errors import SpecError


def tiny_model() -> ModelSpec:
    return ModelSpec(
        name="tiny",
        batch_size=100,
        layers=(
            Layer(name="a", kind="linear", fwd_flops=1e6, activation_bytes=1000.0,
                  variables=(Variable(name="a.w", shape=(250,)),)),
            Layer(name="b", kind="linear", fwd_flops=2e6, activation_bytes=4.0,
                  variables=(Variable(name="b.w", shape=(500,)),), inputs=("a",)),
        ),
    )  # fmt: skip


def tiny_cluster(
    cpu_count: int = 100, gpu_count: int = 8, links: tuple[ResourceLink, ...] = ()
) -> ClusterSpec:
    cpu = ResourceType(
        name="cpu",
        kind="cpu",
        count=cpu_count,
        price_per_hour=0.36,
        tflops=0.1,
        memory_gb=100,
        memory_bw_gbs=10,
        host_memory_gb=10,
        nic_gbps=1,
        overhead_us=5,
    )
    gpu = ResourceType(name="gpu", kind="gpu", count=gpu_count, price_per_hour=3.6, tflops=10,
                       memory_gb=16, memory_bw_gbs=500, host_memory_gb=64, host_link_gbps=100,
                       nic_gbps=10, overhead_us=10)  # fmt: skip
    return ClusterSpec(
        name="tiny-pool",
        device_types=(DeviceType(name="g", fp32_tflops=10, fp16_tflops=10, memory_gb=16, memory_bw_gbs=500),),
        nodes=(Node(name="n0", device="g", gpus=1, nic_gbps=10),),
        intra_node_gbps=100,
        resource_types=(cpu, gpu),
        resource_links=links,
    )


def test_worked_example_by_hand() -> None:
    # Layer a on 4 CPU cores, layer b on 2 GPUs; B = B_o = 100, M = 1e6 samples, one epoch.
    cm = HeterogeneousCostModel(
        tiny_model(), tiny_cluster(), Workload(5e4, batch_size=100, samples_per_epoch=1e6)
    )
    plan = ResourcePlan.from_assignment(["cpu", "gpu"], [4, 2])
    r = cm.evaluate(plan)
    s0, s1 = r.stages
    # Compute is the shared roofline (compute.layer_times, default CostParams: GEMM share 0.70 of
    # peak, 0.80 of bandwidth); neither type names a device of the cluster ("g" is not "gpu"), so
    # each computes on its own figures (resource_device). Stage 0 = layer a (linear, reads the
    # model input: no input gradient) on one core, 0.1 TFLOPS, 10 GB/s, 5 us per kernel, B_o = 100:
    # forward 1e6 · 100 FLOPs / (0.1e12 · 0.7) = 1.428571e-3 s (> bytes (2 · 1000 · 100 + 1000) /
    # (10e9 · 0.8) = 2.5e-5 s); backward the same FLOPs (weight gradient only) -> 2.857143e-3 s
    # parallel; kernels 1 forward + 1 backward + 1 bias reduction = 3 · 5 us serial.
    assert s0.oct == pytest.approx(0.02 / 7 + 1.5e-5)
    assert s0.alpha == pytest.approx((0.02 / 7) / (0.02 / 7 + 1.5e-5))
    # Communication, per direction of the full-duplex boundary (both carry as much): out = layer a's
    # activations (cut 1000 B/sample), in = their gradients; stage 0 has nothing before it.
    # Parallel: 100 · 1000 B over its own NIC, 1 Gbit/s = 1.25e8 B/s -> 8e-4 s (the old model
    # charged 2x: 1.6e-3). Serial: all-reduce 2 · 1000 B of a.w over 1 Gbit/s -> 1.6e-5 s.
    assert s0.odt == pytest.approx(8e-4 + 1.6e-5)
    assert s0.beta == pytest.approx(8e-4 / 8.16e-4)
    # Stage 1 = layer b (linear, reads a) on one GPU unit, 10 TFLOPS, 500 GB/s, 10 us per kernel:
    # forward 2e6 · 100 / (10e12 · 0.7) = 2.857143e-5 s, backward 2x the FLOPs (input and weight
    # gradients) = 5.714286e-5 s (bytes: 102400 and 204800 B at 4e11 B/s, far below) -> 6e-4 / 7
    # parallel; kernels 1 + 2 + 1 bias = 4 · 10 us = 4e-5 s serial.
    assert s1.oct == pytest.approx(6e-4 / 7 + 4e-5)
    # Stage 1 receives a's activations (and sends their gradients) over its own NIC, 10 Gbit/s =
    # 1.25e9 B/s: 100 · 1000 B -> 8e-5 s parallel (the old model charged the receiver nothing);
    # it sends nothing on (the last layer's output is read by no later stage); sync 2 · 2000 B
    # of b.w over 10 Gbit/s -> 3.2e-6 s serial.
    assert s1.odt == pytest.approx(8e-5 + 3.2e-6)
    assert s1.beta == pytest.approx(8e-5 / 8.32e-5)
    # Formulas 2-6: CT_0 = (1.5e-5 + (0.02/7) / 4) / 100 = 5.105e-5 / 7 = 7.292857e-6,
    # DT_0 = (1.6e-5 + 8e-4 / 4) / 100.
    assert r.ct[0] == pytest.approx(5.105e-5 / 7) and r.dt[0] == pytest.approx(2.16e-6)
    assert r.et[0] == pytest.approx(5.105e-3 / 7)  # B · max(CT, DT)
    # CT_1 = (4e-5 + (6e-4/7) / 2) / 100 = 8.285714e-7, DT_1 = (3.2e-6 + 8e-5 / 2) / 100.
    assert r.ct[1] == pytest.approx((4e-5 + 3e-4 / 7) / 100) and r.dt[1] == pytest.approx(4.32e-7)
    assert r.stage_throughput[0] == pytest.approx(7 / 5.105e-5)
    assert r.throughput == pytest.approx(137120.47, rel=1e-6)
    # Formulas 7-8: ET = 1e6 / 137120.47 = 51.05 / 7 = 7.292857 s; Σ p k = 4 · 1e-4 + 2 · 1e-3 = 2.4e-3 USD/s.
    assert r.training_time == pytest.approx(51.05 / 7, rel=1e-6)
    assert r.price_per_hour == pytest.approx(8.64)
    assert r.money == pytest.approx(51.05 / 7 * 2.4e-3, rel=1e-6)


def test_a_receiving_stage_with_few_units_is_bound_by_its_own_link() -> None:
    # 40 CPU cores send layer a's activations to 1 GPU; the cluster declares a 0.5 Gbit/s
    # CPU-GPU link, which caps both sides' per-unit rate (6.25e7 B/s; below either NIC).
    links = (ResourceLink(a="cpu", b="gpu", gbps=0.5),)
    cm = HeterogeneousCostModel(
        tiny_model(), tiny_cluster(links=links), Workload(5e4, batch_size=100, samples_per_epoch=1e6)
    )
    r = cm.evaluate(ResourcePlan.from_assignment(["cpu", "gpu"], [40, 1]))
    s0, s1 = r.stages
    # Both stages move 100 · 1000 B per direction at 6.25e7 B/s: 1.6e-3 s on one unit.
    assert s0.odt == pytest.approx(1.6e-3 + 1.6e-5) and s1.odt == pytest.approx(1.6e-3 + 3.2e-6)
    # Stage 0 splits it over 40 cores: DT_0 = (1.6e-5 + 1.6e-3 / 40) / 100 = 5.6e-7 s, below
    # CT_0 = (1.5e-5 + (0.02/7) / 40) / 100 = 8.642857e-7 s (compute as in the worked example).
    # The one GPU takes it all: DT_1 = (3.2e-6 + 1.6e-3) / 100 = 1.6032e-5 s
    # > CT_1 = (4e-5 + 6e-4/7) / 100 = 1.257143e-6 s.
    assert r.dt[0] == pytest.approx(5.6e-7) and r.ct[0] == pytest.approx((1.5e-5 + 0.005 / 70) / 100)
    assert r.dt[1] == pytest.approx(1.6032e-5) and r.ct[1] == pytest.approx((4e-5 + 6e-4 / 7) / 100)
    assert r.throughput == pytest.approx(1 / 1.6032e-5)  # the receiver is the bottleneck
    # The same stage after nothing (as if it had no predecessor) would only sync its weights.
    assert cm.stage(1, 2, 1, None, None).odt == pytest.approx(3.2e-6)


def test_segment_arrays_equal_the_stage_by_stage_profiles() -> None:
    from simulator import zoo

    cm = HeterogeneousCostModel(
        zoo.model("MATCHNET"), zoo.cluster("HeterPS-4GPU"), Workload(1e5, batch_size=2048)
    )
    seg = cm.segment_arrays()
    n, nt = cm.num_layers, cm.num_types
    rng = np.random.default_rng(0)
    for _ in range(200):
        j = int(rng.integers(0, n))
        e = int(rng.integers(j + 1, n + 1))
        t = int(rng.integers(0, nt))
        nx = None if e == n else int(rng.integers(0, nt))
        pv = None if j == 0 else int(rng.integers(0, nt))
        s = cm.stage(j, e, t, nx, pv)
        idx = (j, e, t, nt if nx is None else nx, nt if pv is None else pv)
        got = (seg.oct[idx], seg.alpha[idx], seg.odt[idx], seg.beta[idx])
        np.testing.assert_allclose(got, (s.oct, s.alpha, s.odt, s.beta), rtol=1e-12)
        assert seg.min_units[idx] == s.min_units and seg.fits[idx] == s.fits


def test_sparse_tables_set_a_memory_floor_and_cross_the_host_link_on_gpus() -> None:
    from simulator import zoo

    model = zoo.model("CTRDNN")
    cm = HeterogeneousCostModel(model, zoo.cluster("HeterPS-2GPU"), Workload(1e5, batch_size=2048))
    table = sum(v.bytes for v in model.layers[0].variables)
    for t, rtype in enumerate(cm.types):
        s = cm.stage(0, 1, t, None, None)  # the layer alone, no neighbouring stage
        assert s.min_units == int(np.ceil(2 * table / (rtype.host_memory_gb * 1e9)))
        if rtype.host_link_gbps is not None:  # a GPU: rows in and gradients out over PCIe, B_o samples
            want = 2048 * 2 * model.layers[0].activation_bytes / (rtype.host_link_gbps * 1e9 / 8)
            assert s.odt == pytest.approx(want)


def test_a_plan_that_does_not_fit_is_rejected_with_field_paths() -> None:
    cm = HeterogeneousCostModel(tiny_model(), tiny_cluster(gpu_count=2), Workload(5e4, batch_size=100))
    with pytest.raises(SpecError) as err:
        cm.evaluate(ResourcePlan.from_assignment(["cpu", "gpu"], [4, 3]))
    assert str(err.value) == "stages.1.units: 'gpu' has 2 units, the plan uses 3"
    with pytest.raises(SpecError, match=r"stages\.0\.last_layer: is 1, the model has 2 layers"):
        cm.evaluate(ResourcePlan.from_assignment(["gpu"], [1]))
    with pytest.raises(ValueError, match="throughput_limit: must be > 0"):
        Workload(0)


def test_compute_is_the_shared_layer_times_on_the_zoo_device_of_each_type() -> None:
    from simulator import zoo
    from simulator.analytical.compute import layer_times
    from simulator.analytical.heterogeneous import resource_device
    from simulator.analytical.params import CostParams

    cluster = zoo.cluster("HeterPS-4GPU")
    model = zoo.model("CTRDNN")
    cm = HeterogeneousCostModel(model, cluster, Workload(1e5, batch_size=512))
    by_name = {d.name: d for d in cluster.device_types}
    names = [resource_device(t, cluster).name for t in cluster.resource_types]
    assert names == ["c5.24xlarge-core", "T4-16GB", "V100-SXM2-16GB", "A100-SXM4-80GB", "H100-SXM5-80GB"]
    assert all(cm.devices[i] is by_name[n] for i, n in enumerate(names) if n in by_name)
    core = cm.devices[0]  # a CPU core: its own per-unit figures
    assert (core.fp32_tflops, core.memory_bw_gbs, core.launch_overhead_us) == (0.096, 5.8667, 5.0)
    for t in range(cm.num_types):
        lt = layer_times(model, cm.devices[t], 512, CostParams())
        whole = cm.stage(0, cm.num_layers, t, None, None)
        assert whole.oct == pytest.approx(lt.step, rel=1e-12)  # the one compute function, summed
        # The serial part (1 - α) is the kernel launches: every layer's kernels x the launch cost.
        free = layer_times(
            model, cm.devices[t].model_copy(update={"launch_overhead_us": 0.0}), 512, CostParams()
        )
        assert whole.alpha * whole.oct == pytest.approx(free.step, rel=1e-12)
