"""Hand-worked numbers for each formula of the analytical model (AutoSync Eq. 1-3).

Every expected value is written as the arithmetic a reader can redo. Common constants:
10 Gbit/s = 10e9 / 8 = 1.25e9 bytes/s; φ = 1e-4 s, δ = 5e-5 s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.analytical import CostParams, cost_breakdown
from simulator.analytical import formulas as f
from simulator.analytical.reference import reference_cost
from simulator.analytical.testing import make_cluster, make_model
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    DeviceType,
    Partition,
    PSSync,
    Strategy,
    Variable,
    VariableStrategy,
)

P = CostParams(phi=1e-4, delta=5e-5, efficiency=0.5)
B10G = 1.25e9  # bytes per second of a 10 Gbit/s link
MB = 1_000_000
W = Variable(name="w", shape=(1000, 250))  # 250,000 fp32 values = 1,000,000 bytes


def one(var: str, *syncs: PSSync | CollectiveSync, shards: int = 1) -> VariableStrategy:
    return VariableStrategy(variable=var, partition=Partition(axis=0, shards=shards), shards=syncs)


def both(model, cluster, strategy):  # type: ignore[no-untyped-def]
    """The breakdown (vectorised path) and the reference loop agree; return the breakdown."""
    strategy.check(model, cluster)
    got = cost_breakdown(model, cluster, strategy, P)
    ref = reference_cost(model, cluster, strategy, P)
    assert got.t_iter == pytest.approx(ref.t_iter, rel=1e-12)
    assert got.t_sync == pytest.approx(ref.t_sync, rel=1e-12)
    return got


def test_ps_one_variable_on_two_nodes() -> None:
    # Server on n0; workers n0 (same machine: I_d = 0, free) and n1 (1 GPU).
    # Eq. 2, both directions: transfer = 2 · 1e6 B / 1.25e9 B/s · r=1 = 1.6e-3 s;
    # overhead = 2 messages · φ = 2e-4 s; kernel latency δ = 5e-5 s.
    cluster = make_cluster([1, 1], nic_gbps=10.0)
    model = make_model([W])
    s = Strategy(variables=(one("w", PSSync(server="n0")),))
    r = both(model, cluster, s)
    assert r.ps["n0"].transfer == pytest.approx(2 * MB / B10G)
    assert r.ps["n0"].messages == 2
    assert r.t_ps == pytest.approx(1.6e-3 + 2e-4 + 5e-5)
    assert r.t_cc == 0.0


def test_ps_server_on_cpu_node_serves_both_workers() -> None:
    # Server n2 has no GPU: both workers n0, n1 are remote: 2 directions · 2 workers · 0.8e-3 s.
    cluster = make_cluster([1, 1, 0], nic_gbps=10.0)
    s = Strategy(variables=(one("w", PSSync(server="n2")),))
    r = both(make_model([W]), cluster, s)
    assert r.t_ps == pytest.approx(2 * 2 * 0.8e-3 + 4 * 1e-4 + 5e-5)


def test_ring_of_four_with_one_slow_link() -> None:
    # Four 1-GPU nodes; n3's NIC is 5 Gbit/s, so the ring links n2-n3 and n3-n0 run at 5 Gbit/s:
    # b_m = 5e9 / 8 = 6.25e8 B/s. AllReduce (Eq. 3): 2·(4-1)/4 · 1e6 / 6.25e8 = 1.5 · 1.6e-3 = 2.4e-3 s,
    # plus w·φ = 4e-4 s and δ = 5e-5 s.
    cluster = make_cluster([1, 1, 1, 1], nic_gbps=[10.0, 10.0, 10.0, 5.0])
    assert f.ring_bandwidth_gbps(cluster) == 5.0
    s = Strategy(variables=(one("w", CollectiveSync(group=0)),))
    r = both(make_model([W]), cluster, s)
    assert r.collective["0/allreduce-ring"].transfer == pytest.approx(2.4e-3)
    assert r.t_cc == pytest.approx(2.4e-3 + 4e-4 + 5e-5)
    # The other primitives of Eq. 3 on the same ring, same 1e6 bytes:
    # ReduceScatter and AllGather (4-1)/4 · 1.6e-3 = 1.2e-3; Broadcast and Reduce 1 · 1.6e-3.
    for prim, want in [
        ("reducescatter", 1.2e-3),
        ("allgather", 1.2e-3),
        ("broadcast", 1.6e-3),
        ("reduce", 1.6e-3),
    ]:
        t = f.collective_terms(prim, MB, 4, 5.0)  # type: ignore[arg-type]
        assert t.transfer == pytest.approx(want)
        assert (t.phi_coef, t.delta_coef) == (4.0, 1.0)


def test_hierarchical_reduction_ps_and_allreduce() -> None:
    # Two nodes x 4 GPUs, NIC 10 Gbit/s, intra-node 100 Gbit/s = 1.25e10 B/s. Server on n0.
    cluster = make_cluster([4, 4], nic_gbps=10.0, intra_gbps=100.0)
    model = make_model([W])
    # PS without local replication: n1 sends r = 4 messages each way:
    # transfer 2 · 4 · 1e6 / 1.25e9 = 6.4e-3 s, 8 messages.
    flat = both(model, cluster, Strategy(variables=(one("w", PSSync(server="n0")),)))
    assert flat.t_ps == pytest.approx(6.4e-3 + 8 * 1e-4 + 5e-5)
    # With hierarchical reduction (I_p): one message per node each way: 1.6e-3 s, 2 messages; plus
    # the nodes' own reduce and broadcast (in parallel over the nodes, no transfer time inside a
    # host): 2 · 4 messages and 2 more δ.
    hier = both(model, cluster, Strategy(variables=(one("w", PSSync(server="n0", local_replication=True)),)))
    assert hier.t_ps == pytest.approx(1.6e-3 + (2 + 8) * 1e-4 + 3 * 5e-5)
    # Hierarchical all-reduce: intra reduce-scatter 3/4 · 1e6 / 1.25e10 = 6e-5 s, the same again for
    # the all-gather, inter-node all-reduce over n = 2 nodes 2·1/2 · 1e6 / 1.25e9 = 8e-4 s:
    # transfer 9.2e-4 s; φ coefficient 2·4 (two intra phases) + 2 (inter) = 10.
    s = Strategy(variables=(one("w", CollectiveSync(algorithm="hierarchical")),))
    r = both(model, cluster, s)
    call = r.collective["0/allreduce-hierarchical"]
    assert call.transfer == pytest.approx(9.2e-4)
    assert r.t_cc == pytest.approx(9.2e-4 + 10 * 1e-4 + 5e-5)
    # The flat ring over 8 GPUs is bounded by the 10 Gbit/s inter-node link: 2·7/8 · 0.8e-3 = 1.4e-3 s.
    ring = both(model, cluster, Strategy(variables=(one("w", CollectiveSync()),)))
    assert ring.t_cc == pytest.approx(1.4e-3 + 8 * 1e-4 + 5e-5)


def test_local_replication_charges_the_nodes_own_reduce_and_broadcast() -> None:
    # Server on n0 of two nodes; n1 has 4 GPUs, 10 Gbit/s. Eq. 2 with I_p: n1 sends one message each
    # way, 2 · 1e6 / 1.25e9 = 1.6e-3 s, 2 messages. The nodes' own reduce and broadcast (the
    # executor's two collectives among a node's GPUs) add 2 · g φ + 2 δ with g the most GPUs of a
    # node: 4 on n0 (its GPUs reduce too, the server being on their host) -> 8 messages, 2 δ.
    model = make_model([W])
    lr = Strategy(variables=(one("w", PSSync(server="n0", local_replication=True)),))
    uneven = make_cluster([4, 1], nic_gbps=10.0)  # n0 has 4 GPUs, n1 one
    r = both(model, uneven, lr)
    assert r.t_ps == pytest.approx(1.6e-3 + (2 + 8) * 1e-4 + 3 * 5e-5)
    # On 1-GPU nodes there is nothing to reduce inside a node: I_p changes nothing.
    flat = make_cluster([1, 1], nic_gbps=10.0)
    plain = Strategy(variables=(one("w", PSSync(server="n0")),))
    assert both(model, flat, lr).t_ps == pytest.approx(both(model, flat, plain).t_ps)
    # Measured α (one PS round 2e-3 s, one collective call 5e-4 s): a dense shard's round, plus two
    # calls inside the node: 1.6e-3 + 2e-3 + 2 · 5e-4.
    alpha = replace(P, ps_round_s=2e-3, call_overhead_s=5e-4)
    got = cost_breakdown(model, uneven, lr, alpha)
    assert got.t_ps == pytest.approx(1.6e-3 + 2e-3 + 2 * 5e-4)
    assert reference_cost(model, uneven, lr, alpha).t_sync == pytest.approx(got.t_sync, rel=1e-12)


def test_sparse_variable_ps_and_allgather() -> None:
    # Embedding 10000 x 64 fp32 = 2,560,000 bytes, 1% of rows touched per step:
    # m = 0.01 · 2,560,000 (values) + 0.01 · 10000 · 8 (int64 indices) = 25,600 + 800 = 26,400 bytes.
    emb = Variable(name="emb", shape=(10000, 64), sparse=True, density=0.01)
    model = make_model([emb])
    two = make_cluster([1, 1], nic_gbps=10.0)
    r = both(model, two, Strategy(variables=(one("emb", PSSync(server="n0")),)))
    assert r.ps["n0"].bytes == pytest.approx(26_400)
    assert r.t_ps == pytest.approx(2 * 26_400 / B10G + 2e-4 + 5e-5)
    # AllGather on four 1-GPU nodes gathers w · m: (4-1)/4 · 4 · 26,400 / 1.25e9 = 3 · 2.112e-5 = 6.336e-5 s.
    four = make_cluster([1, 1, 1, 1], nic_gbps=10.0)
    r = both(model, four, Strategy(variables=(one("emb", CollectiveSync()),)))
    assert r.collective["0/allgather"].transfer == pytest.approx(6.336e-5)
    assert r.t_cc == pytest.approx(6.336e-5 + 4e-4 + 5e-5)


def test_fp16_and_powersgd_compression() -> None:
    # Four 1-GPU nodes at 10 Gbit/s; ring all-reduce costs 2·3/4 / 1.25e9 = 1.2e-9 s per byte.
    four = make_cluster([1, 1, 1, 1], nic_gbps=10.0)
    model = make_model([W])
    fp16 = CollectiveSync(compressor=Compressor(kind="fp16"))
    r = both(model, four, Strategy(variables=(one("w", fp16),)))
    assert r.collective["0/allreduce-ring/fp16"].bytes == pytest.approx(500_000)  # half of 1e6
    assert r.t_cc == pytest.approx(500_000 * 1.2e-9 + 4e-4 + 5e-5)  # 6e-4 s transfer
    # PowerSGD rank 2 of the 1000 x 250 matrix: 2 · (1000 + 250) fp32 values = 10,000 bytes, sent
    # by two all-reduces (P, then Q; simulator.spec.comm), so Eq. 3's constant is paid twice.
    psgd = CollectiveSync(compressor=Compressor(kind="powersgd", rank=2))
    r = both(model, four, Strategy(variables=(one("w", psgd),)))
    assert r.collective["0/allreduce-ring/powersgd2"].bytes == pytest.approx(10_000)
    assert r.t_cc == pytest.approx(1.2e-5 + 2 * (4e-4 + 5e-5))
    # Rank 200: (1000 + 250) · 200 = 250,000 values is not fewer than 1000 · 250, so the matrix
    # goes uncompressed in one all-reduce, as the executor (torch's _should_compress rule) does.
    big = CollectiveSync(compressor=Compressor(kind="powersgd", rank=200))
    r = both(model, four, Strategy(variables=(one("w", big),)))
    assert r.collective["0/allreduce-ring/powersgd200"].bytes == pytest.approx(1e6)
    assert r.t_cc == pytest.approx(1e6 * 1.2e-9 + 4e-4 + 5e-5)


def test_merge_group_of_three_variables() -> None:
    # 1e6, 2e6 and 3e6 bytes in group 0 on four 1-GPU nodes: one call of 6e6 bytes:
    # 1.2e-9 · 6e6 = 7.2e-3 s, plus 4φ + δ once.
    vs = [Variable(name=f"v{i}", shape=(i * 1000, 250)) for i in (1, 2, 3)]
    model = make_model(vs)
    four = make_cluster([1, 1, 1, 1], nic_gbps=10.0)
    merged = Strategy(variables=tuple(one(v.name, CollectiveSync(group=0)) for v in vs))
    r = both(model, four, merged)
    assert len(r.collective) == 1 and r.collective["0/allreduce-ring"].shards == 3
    assert r.t_cc == pytest.approx(7.2e-3 + 4e-4 + 5e-5)
    # Three groups: the same bytes, but three calls each paying 4φ + δ.
    split = Strategy(variables=tuple(one(v.name, CollectiveSync(group=i)) for i, v in enumerate(vs)))
    assert both(model, four, split).t_cc == pytest.approx(7.2e-3 + 3 * (4e-4 + 5e-5))


def test_partitioned_variable_shards_accumulate_per_server() -> None:
    # 10 x 100 fp32 split on axis 0 into 3 shards: rows 4, 3, 3 -> 1600, 1200, 1200 bytes.
    # Shards 0 and 1 on n1, shard 2 on n0 (two 1-GPU nodes): each shard pays 2·bytes/1.25e9 + 2φ + δ.
    v = Variable(name="v", shape=(10, 100))
    s = Strategy(
        variables=(one("v", PSSync(server="n1"), PSSync(server="n1"), PSSync(server="n0"), shards=3),)
    )
    r = both(make_model([v]), make_cluster([1, 1]), s)
    assert r.ps["n1"].bytes == pytest.approx(2800) and r.ps["n0"].bytes == pytest.approx(1200)
    assert r.ps["n1"].time == pytest.approx(2 * 2800 / B10G + 2 * (2e-4 + 5e-5))
    assert r.t_ps == r.ps["n1"].time  # the busiest server


# T_comp of the one-layer model below (simulator.analytical.compute, defaults: gemm reaches 0.7 of
# peak, streams 0.8 of bandwidth, 5 us per kernel), corrected by P's efficiency 0.5:
# F = 1e9 FLOPs per sample, B = 32: 3.2e10 FLOPs forward; the layer reads the model input, so its
# backward computes the weight gradient only: 3.2e10 FLOPs again. Each pass: 3.2e10 / (1e13 · 0.7)
# = 4.5714e-3 s (compute-bound: (2 · 1024 · 32 + 1e6) bytes / (500e9 · 0.8) = 2.7e-6 s is less),
# plus one kernel, 5e-6 s. T_comp = 2 · (4.5714e-3 + 5e-6) / 0.5.
T_COMP_10 = 2 * (3.2e10 / 7e12 + 5e-6) / 0.5


def test_compute_time_iteration_throughput_and_price() -> None:
    # Sync (1.85e-3 s) is smaller than T_comp. The only variable's gradient is ready when backward
    # ends, so its sync cannot overlap anything (bucket overlap): T = T_comp + 1.85e-3;
    # throughput = 32 samples · 2 GPUs / T; two nodes at $3.6/h cost 2 · 3.6 / 3600 = $0.002 per s.
    # With the paper's full overlap (Eq. 1), T = max(T_comp, T_sync) = T_comp.
    cluster = make_cluster([1, 1], nic_gbps=10.0, fp32_tflops=10.0, price_per_hour=3.6)
    model = make_model([W], fwd_flops=1e9, batch_size=32)
    strategy = Strategy(variables=(one("w", PSSync(server="n0")),))
    r = both(model, cluster, strategy)
    t = T_COMP_10 + 1.85e-3
    assert r.t_comp == pytest.approx(T_COMP_10)
    assert r.t_iter == pytest.approx(t)
    assert r.throughput == pytest.approx(64 / t)
    assert r.cost_per_iteration == pytest.approx(0.002 * t)
    full = cost_breakdown(model, cluster, strategy, replace(P, overlap="full"))
    assert full.t_iter == full.t_comp == pytest.approx(T_COMP_10)
    assert r.compute_source == "roofline"


def test_slowest_device_type_bounds_compute() -> None:
    # Two device types: 10 and 4 TFLOPS: the 4 TFLOPS node bounds the step:
    # 2 · (3.2e10 / (4e12 · 0.7) + 5e-6) / 0.5.
    base = make_cluster([1, 1])
    slow = DeviceType(name="slow", fp32_tflops=4.0, fp16_tflops=8.0, memory_gb=16, memory_bw_gbs=300)
    cluster = ClusterSpec(
        name="mixed",
        device_types=(*base.device_types, slow),
        nodes=(base.nodes[0], base.nodes[1].model_copy(update={"device": "slow"})),
        intra_node_gbps=100.0,
    )
    model = make_model([W], fwd_flops=1e9, batch_size=32)
    slow_t = 2 * (3.2e10 / 2.8e12 + 5e-6)
    assert f.compute_time(model, cluster, P) == pytest.approx(slow_t / 0.5)
    # A per-type correction applies to that type only.
    assert f.compute_time(model, cluster, P.with_efficiency("slow", 0.25)) == pytest.approx(slow_t / 0.25)


def test_combine_max_overlaps_ps_and_collectives() -> None:
    # One PS variable (t_ps = 1.85e-3 s, first test) and one all-reduced variable on two 1-GPU nodes
    # (2·1/2 · 1e6 / 1.25e9 = 8e-4 s + 2φ + δ = 1.05e-3 s): sum 2.9e-3 s, max 1.85e-3 s.
    v2 = Variable(name="u", shape=(1000, 250))
    model = make_model([W, v2])
    cluster = make_cluster([1, 1])
    s = Strategy(variables=(one("w", PSSync(server="n0")), one("u", CollectiveSync())))
    summed = cost_breakdown(model, cluster, s, P)
    maxed = cost_breakdown(model, cluster, s, CostParams(phi=1e-4, delta=5e-5, efficiency=0.5, combine="max"))
    assert summed.t_sync == pytest.approx(1.85e-3 + 1.05e-3)
    assert maxed.t_sync == pytest.approx(1.85e-3)


def test_measured_per_call_cost_replaces_phi_and_delta() -> None:
    # PS, 1 MB on two nodes: transfer 2 · 1e6 / 1.25e9 = 1.6e-3 s, plus the measured round 1e-3 s
    # (instead of 2 messages · φ + δ = 2.5e-4). A ring all-reduce of 1 MB over 2 GPUs: transfer
    # 2·(2-1)/2 · 1e6 / 1.25e9 = 8e-4 s plus one measured call 5e-4 s; hierarchical: three calls.
    cluster = make_cluster([1, 1], nic_gbps=10.0)
    model = make_model([W])
    params = replace(P, call_overhead_s=5e-4, ps_round_s=1e-3)
    ps = cost_breakdown(model, cluster, Strategy(variables=(one("w", PSSync(server="n0")),)), params)
    assert ps.t_sync == pytest.approx(1.6e-3 + 1e-3)
    ring = cost_breakdown(model, cluster, Strategy(variables=(one("w", CollectiveSync()),)), params)
    assert ring.t_sync == pytest.approx(8e-4 + 5e-4)
    hier = Strategy(variables=(one("w", CollectiveSync(algorithm="hierarchical")),))
    h = cost_breakdown(model, cluster, hier, params)
    plain = cost_breakdown(model, cluster, hier, P)
    assert h.t_sync == pytest.approx(plain.t_sync - (P.phi * 2 + P.delta) + 3 * 5e-4)


def test_a_sparse_ps_shard_costs_two_measured_rounds() -> None:
    # Sparse PS: (count, indices, rows) each way, the count first, so two dependent rounds of the
    # measured α (simulator.spec.comm.ps_rounds); a dense shard is one.
    cluster = make_cluster([1, 1], nic_gbps=10.0)
    emb = Variable(name="w", shape=(1000, 250), sparse=True, density=0.1)
    model = make_model([emb])
    s = Strategy(variables=(one("w", PSSync(server="n0")),))
    r = cost_breakdown(model, cluster, s, replace(P, call_overhead_s=5e-4, ps_round_s=1e-3))
    assert r.t_ps == pytest.approx(r.ps["n0"].transfer + 2 * 1e-3)


def test_a_sparse_unit_costs_three_measured_all_gathers() -> None:
    # The executor sends a sparse unit as three all-gathers (counts, indices, rows): with a
    # measured all-gather α the call costs its transfer plus 3 α_ag, and only α_ag moves it.
    cluster = make_cluster([1, 1], nic_gbps=10.0)
    emb = Variable(name="w", shape=(1000, 250), sparse=True, density=0.1)
    model = make_model([emb])
    s = Strategy(variables=(one("w", CollectiveSync()),))
    same = cost_breakdown(model, cluster, s, replace(P, call_overhead_s=5e-4))
    gather = cost_breakdown(model, cluster, s, replace(P, call_overhead_s=5e-4, allgather_call_s=2e-3))
    assert gather.t_sync - same.t_sync == pytest.approx(3 * (2e-3 - 5e-4))
    (call,) = gather.collective.values()
    assert call.op == "allgather" and call.time == pytest.approx(call.transfer + 3 * 2e-3)
    with pytest.raises(ValueError, match="allgather_call_s"):
        CostParams(call_overhead_s=5e-4, allgather_call_s=-1.0)


def test_a_collective_unit_pays_the_executor_hand_off_once_whatever_its_calls() -> None:
    # The probe's unit path minus the bare call (unit_overhead_s) is paid once per unit: a ring
    # unit is 1 all-reduce + 1 hand-off, a hierarchical one 3 calls + 1 hand-off.
    cluster = make_cluster([2, 2], nic_gbps=10.0)
    model = make_model([Variable(name="w", shape=(1000, 250))])
    base = replace(P, call_overhead_s=5e-4)
    unit = replace(base, unit_overhead_s=7e-4)
    for algorithm, calls in (("ring", 1), ("hierarchical", 3)):
        s = Strategy(variables=(one("w", CollectiveSync(algorithm=algorithm)),))
        (call,) = cost_breakdown(model, cluster, s, unit).collective.values()
        assert call.time == pytest.approx(call.transfer + calls * 5e-4 + 7e-4)
        without = cost_breakdown(model, cluster, s, base)
        assert cost_breakdown(model, cluster, s, unit).t_sync - without.t_sync == pytest.approx(7e-4)
    with pytest.raises(ValueError, match="unit_overhead_s"):
        CostParams(call_overhead_s=5e-4, unit_overhead_s=-1.0)


def test_node_latency_is_paid_per_hop_of_a_collective_and_once_per_direction_of_a_ps_shard() -> None:
    # Nodes with latency_us 50 and 30: one way (50 + 30) / 2 = 40 us. PS on n0: push + pull =
    # 2 · 40 us on top of Eq. 2; a ring all-reduce over 2 GPUs: 2 (w - 1) = 2 hops · 40 us.
    base = make_cluster([1, 1], nic_gbps=10.0)
    cluster = base.model_copy(
        update={
            "nodes": (
                base.nodes[0].model_copy(update={"latency_us": 50.0}),
                base.nodes[1].model_copy(update={"latency_us": 30.0}),
            )
        }
    )
    model = make_model([W])
    for sync in (PSSync(server="n0"), CollectiveSync()):
        s = Strategy(variables=(one("w", sync),))
        with_latency = both(model, cluster, s).t_sync
        without = both(model, base, s).t_sync
        assert with_latency - without == pytest.approx(80e-6)
    # A measured per-call α already contains whatever latency the cluster has: nothing is added.
    params = replace(P, call_overhead_s=5e-4, ps_round_s=1e-3)
    s = Strategy(variables=(one("w", CollectiveSync()),))
    assert cost_breakdown(model, cluster, s, params).t_sync == pytest.approx(
        cost_breakdown(model, base, s, params).t_sync
    )
