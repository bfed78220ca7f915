"""The executor's pure parts, checked by hand: unit order, replay sizes and times, aggregation."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.executor import ExecutorConfig
from runtime.executor.layout import RankLayout
from runtime.executor.plan import CollectiveUnit, PSUnit, build_plan
from runtime.executor.reference import GPU, tiny_model, two_by_two
from runtime.executor.results import aggregate
from runtime.executor.session import memory_failure
from runtime.executor.shards import powersgd_rank, replay_shape
from runtime.executor.worker import layer_seconds
from simulator.analytical import CostParams
from simulator.analytical.formulas import compute_time
from simulator.memory import stage_memory
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    Node,
    Partition,
    PSSync,
    Strategy,
    VariableStrategy,
)

MODEL = tiny_model()  # variables: emb.w, l1.w, l1.b, l2.w, l2.b, norm.g, l3.w, l3.b


def test_layout_of_a_cluster_with_a_cpu_only_first_node() -> None:
    cpu_first = ClusterSpec(
        name="c",
        device_types=(GPU,),
        intra_node_gbps=100.0,
        nodes=(
            Node(name="ps", device=GPU.name, gpus=0, nic_gbps=10.0),
            Node(name="a", device=GPU.name, gpus=2, nic_gbps=10.0),
            Node(name="b", device=GPU.name, gpus=1, nic_gbps=10.0),
        ),
    )
    lay = RankLayout(cpu_first)
    assert lay.world == 3 + 3
    assert [lay.node_of(r) for r in range(6)] == [1, 1, 2, 0, 1, 2]
    assert lay.node_workers == ((), (0, 1), (2,))
    assert lay.leaders == (0, 2)
    assert lay.coordinator == 3  # node 0's server: the store must live on node 0


def test_units_follow_backward_order_and_split_groups_by_compressor() -> None:
    fp16 = Compressor(kind="fp16")
    subs = {
        "emb.w": VariableStrategy(variable="emb.w", shards=(CollectiveSync(group=0),)),
        "l1.w": VariableStrategy(
            variable="l1.w",
            partition=Partition(axis=1, shards=2),
            shards=(PSSync(server="n1"), CollectiveSync(group=1)),
        ),
        "l1.b": VariableStrategy(variable="l1.b", shards=(CollectiveSync(group=1, compressor=fp16),)),
        "l2.w": VariableStrategy(variable="l2.w", shards=(CollectiveSync(group=0),)),
        "l2.b": VariableStrategy(variable="l2.b", shards=(CollectiveSync(group=1),)),
        "norm.g": VariableStrategy(variable="norm.g", shards=(PSSync(server="n0", local_replication=True),)),
        "l3.w": VariableStrategy(variable="l3.w", shards=(CollectiveSync(group=1),)),
        "l3.b": VariableStrategy(variable="l3.b", shards=(CollectiveSync(group=1),)),
    }
    plan = build_plan(MODEL, two_by_two(), Strategy(variables=tuple(subs[v.name] for v in MODEL.variables)))
    # shard ids: emb 0, l1.w 1 (PS) and 2 (group 1), l1.b 3, l2.w 4, l2.b 5, norm.g 6, l3.w 7, l3.b 8
    assert [(s.variable, s.offset, s.shape) for s in plan.shards[1:3]] == [
        ("l1.w", 0, (32, 8)),
        ("l1.w", 8, (32, 8)),
    ]
    got = [
        ("ps", u.shard, u.server) if isinstance(u, PSUnit) else (u.group, u.compressor.kind, u.shards)
        for u in plan.units
    ]
    assert got == [
        ("ps", 6, 0),  # norm.g is ready third in backward (after l3.b, l3.w)
        (1, "fp16", (3,)),  # group 1's fp16 part completes with l1.b (ready before l1.w)
        (1, "none", (8, 7, 5, 2)),  # group 1 (uncompressed) completes with l1.w ...
        ("ps", 1, 1),  # ... as does l1.w's PS shard (ties: collectives first)
        (0, "none", (4, 0)),  # group 0 completes with the embedding, last in backward
    ]
    assert [u.id for u in plan.units] == list(range(5))
    assert isinstance(plan.units[1], CollectiveUnit) and isinstance(plan.units[3], PSUnit)


def test_replay_shapes_divide_the_bytes_by_the_scale() -> None:
    plan = build_plan(
        MODEL,
        two_by_two(),
        Strategy(
            variables=tuple(
                VariableStrategy(
                    variable=v.name,
                    shards=(
                        CollectiveSync(compressor=Compressor(kind="powersgd", rank=2))
                        if v.name == "l1.w"
                        else CollectiveSync(),
                    ),
                )
                for v in MODEL.variables
            )
        ),
    )
    by = {s.variable: s for s in plan.shards}
    assert replay_shape(by["l2.w"], 1.0) == (768,)
    assert replay_shape(by["l2.w"], 10.0) == (77,)  # ceil(768 / 10)
    assert replay_shape(by["l3.b"], 100.0) == (1,)
    # Sparse: rows divided (the touched fraction stays the variable's density); row width kept.
    assert replay_shape(by["emb.w"], 4.0) == (10, 16)
    # PowerSGD: P [n, r] and Q [m, r] travel, so both sides are divided; never below the rank.
    assert powersgd_rank(by["l1.w"]) == 2
    assert replay_shape(by["l1.w"], 4.0) == (8, 4)
    assert replay_shape(by["l1.w"], 100.0) == (2, 2)


def test_powersgd_keeps_matrices_it_would_not_shrink_uncompressed() -> None:
    plan = build_plan(
        MODEL,
        two_by_two(),
        Strategy(
            variables=tuple(
                VariableStrategy(
                    variable=v.name,
                    shards=(
                        CollectiveSync(compressor=Compressor(kind="powersgd", rank=4))
                        if v.name == "l3.w"
                        else CollectiveSync(),
                    ),
                )
                for v in MODEL.variables
            )
        ),
    )
    l3w = next(s for s in plan.shards if s.variable == "l3.w")  # [8, 24]: (8 + 24) * 4 = 128 < 192
    assert powersgd_rank(l3w) == 4
    # rank 6: (8 + 24) * 6 = 192, not fewer than 8 * 24 = 192 -> sent uncompressed
    plan6 = build_plan(
        MODEL,
        two_by_two(),
        Strategy(
            variables=tuple(
                VariableStrategy(
                    variable=v.name,
                    shards=(
                        CollectiveSync(compressor=Compressor(kind="powersgd", rank=6))
                        if v.name == "l3.w"
                        else CollectiveSync(),
                    ),
                )
                for v in MODEL.variables
            )
        ),
    )
    assert powersgd_rank(next(s for s in plan6.shards if s.variable == "l3.w")) is None


def test_layer_seconds_are_the_cost_models_compute_times() -> None:
    secs = layer_seconds(MODEL, GPU, batch=4, efficiency=0.5)
    # l1 (16 -> 32 with bias, reads no other layer: weight gradient only), roofline defaults
    # (0.8 of 900 GB/s, 5 us per kernel), correction 0.5. Forward: 2·16·32·4 FLOPs is 6e-10 s at
    # 0.7 · 10 TFLOPS, less than its bytes: (128 + 128)·4 activations + 544·4 parameters = 3200 B
    # over 7.2e11 B/s; one kernel. Backward: 1024 + 2·2176 = 5376 B; two kernels (dW, bias sum).
    assert secs[1][0] == pytest.approx((3200 / 7.2e11 + 5e-6) / 0.5)
    assert secs[1][1] == pytest.approx((5376 / 7.2e11 + 2 * 5e-6) / 0.5)
    # Replay and the analytical T_comp are one function: a one-node cluster of this GPU agrees.
    cluster = ClusterSpec(name="one", device_types=(GPU,), intra_node_gbps=10.0,
                          nodes=(Node(name="n", device=GPU.name, gpus=1, nic_gbps=10.0),))  # fmt: skip
    t_comp = compute_time(MODEL, cluster, CostParams(efficiency=0.5))
    assert sum(f + b for f, b in secs) == pytest.approx(t_comp)


def test_aggregate_measures_from_the_last_start_to_the_last_finish() -> None:
    cfg = ExecutorConfig(warmup=1, iterations=2)
    # per worker, per iteration: (start after the barrier, end of backward, end of sync)
    ranks: list[dict[str, Any]] = [
        {"role": "worker", "times": [(0.0, 1.0, 1.5), (1.7, 2.5, 3.0), (3.3, 4.0, 4.2)]},
        {"role": "worker", "times": [(0.1, 1.0, 1.6), (1.8, 2.4, 3.1), (3.2, 4.1, 4.5)]},
        {"role": "server"},
    ]
    m = aggregate(ranks, cfg, {})
    assert m.iteration_times == pytest.approx((3.1 - 1.8, 4.5 - 3.3))
    assert m.compute_times == pytest.approx((0.7, 0.8))
    assert m.sync_wait_times == pytest.approx((0.6, 0.3))
    assert m.warmup == 1 and m.ok
    first = aggregate(ranks, ExecutorConfig(warmup=0, iterations=3), {})
    assert first.iteration_times[0] == pytest.approx(1.6 - 0.1)  # from the latest start
    assert m.environment["dilation"] == 1.0 and m.environment["per_call_overhead_s"] == {}


def test_aggregate_divides_every_time_and_the_probe_by_the_dilation() -> None:
    probe = {"collective": [(0.0, 0.004), (1.0, 1.006)], "ps_round": [(2.0, 2.010), (3.0, 3.010)]}
    late = {"collective": [(0.001, 0.008), (1.0, 1.004)], "ps_round": [(2.0, 2.012), (3.0, 3.008)]}
    ranks: list[dict[str, Any]] = [
        {"role": "worker", "times": [(0.0, 2.0, 3.0)], "probe": probe},
        {"role": "worker", "times": [(0.5, 2.5, 4.5)], "probe": late},
    ]
    m = aggregate(ranks, ExecutorConfig(warmup=0, iterations=1, dilation=4.0), {})
    assert m.iteration_times == pytest.approx((4.0 / 4,))
    assert m.compute_times == pytest.approx((2.0 / 4,))
    assert m.sync_wait_times == pytest.approx((1.5 / 4,))
    # per repetition: latest end - latest start; median over repetitions; divided by D
    coll = sorted([0.008 - 0.001, 1.006 - 1.0])
    ps = sorted([2.012 - 2.0, 3.010 - 3.0])
    over = m.environment["per_call_overhead_s"]
    assert over["collective"] == pytest.approx(sum(coll) / 2 / 4)
    assert over["ps_round"] == pytest.approx(sum(ps) / 2 / 4)
    assert m.environment["dilation"] == 4.0


def test_dilation_is_replay_only_and_multiplies_the_link_scale() -> None:
    assert ExecutorConfig(scale=50.0, dilation=6.0).link_scale == 300.0
    with pytest.raises(ValueError, match=r"ExecutorConfig\.dilation"):
        ExecutorConfig(compute="real", dilation=2.0)
    with pytest.raises(ValueError, match=r"ExecutorConfig\.dilation"):
        ExecutorConfig(dilation=0.5)


def test_memory_estimate() -> None:
    assert memory_failure(MODEL, two_by_two(), 4) is None
    need = stage_memory(MODEL, 0, len(MODEL.layers), stashed_samples=4, state_factor=0.0).total
    tiny = GPU.model_copy(update={"memory_gb": need / 1e9 * 0.99})
    cluster = two_by_two().model_copy(update={"device_types": (tiny,)})
    reason = memory_failure(MODEL, cluster, 4)
    assert reason is not None and reason.startswith("out of memory (estimated)")
