"""Eq. 1 per bucket (simulator/analytical/overlap.py): hand-worked ends of serial channels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.analytical import CostParams, compute, cost_breakdown
from simulator.analytical.reference import reference_cost
from simulator.analytical.testing import make_cluster, make_model
from simulator.spec import CollectiveSync, PSSync, Strategy, Variable, VariableStrategy

P = CostParams(phi=1e-4, delta=5e-5, efficiency=0.5)
W0 = Variable(name="w0", shape=(1000, 250))  # 1 MB each
W1 = Variable(name="w1", shape=(1000, 250))


def _strategy(g0: int, g1: int) -> Strategy:
    return Strategy(
        variables=(
            VariableStrategy(variable="w0", shards=(CollectiveSync(group=g0),)),
            VariableStrategy(variable="w1", shards=(CollectiveSync(group=g1),)),
        )
    )


def test_two_buckets_overlap_the_first_layers_backward() -> None:
    cluster = make_cluster([1, 1], nic_gbps=10.0, fp32_tflops=10.0)
    model = make_model([W0, W1], fwd_flops=2e9, batch_size=32)
    t = compute.layer_times(model, cluster.device_type(0), 32, P)
    fwd, (b0, b1) = float(t.fwd.sum()), (float(x) for x in t.bwd)
    t_comp = fwd + b0 + b1
    split = cost_breakdown(model, cluster, _strategy(0, 1), P)
    d = [c.time for c in split.collective.values()]  # the two calls' Eq. 3 times (1 MB each: equal)
    assert len(d) == 2 and d[0] == pytest.approx(d[1])
    # w1's bucket is ready after layer 1's backward (backward visits layers in reverse), w0's at
    # the end of backward; one channel: end = max(T_comp, fwd + b1 + d) + d.
    want = max(t_comp, fwd + b1 + d[0]) + d[1]
    assert split.t_comp == pytest.approx(t_comp)
    assert split.t_iter == pytest.approx(want)
    assert reference_cost(model, cluster, _strategy(0, 1), P).t_iter == pytest.approx(want)
    # One bucket of both: ready at the end of backward, nothing overlaps: T = T_comp + Eq. 3 (2 MB).
    fused = cost_breakdown(model, cluster, _strategy(0, 0), P)
    assert fused.t_iter == pytest.approx(t_comp + fused.t_sync)
    # Split buckets hide part of the sync; under the paper's full overlap both would be T_comp.
    assert split.t_iter < fused.t_iter
    full = replace(P, overlap="full")
    assert cost_breakdown(model, cluster, _strategy(0, 1), full).t_iter == pytest.approx(
        max(t_comp, split.t_sync)
    )


def test_servers_are_channels_of_their_own_under_max_and_share_one_under_sum() -> None:
    # w0 (ready at the end of backward) on n1's server, w1 (ready after layer 1's backward) on
    # n0's; each shard's Eq. 2 time is 1.85e-3 s (1 MB, two nodes; see test_analytical_handworked).
    cluster = make_cluster([1, 1], nic_gbps=10.0, fp32_tflops=10.0)
    model = make_model([W0, W1], fwd_flops=2e9, batch_size=32)
    s = Strategy(
        variables=(
            VariableStrategy(variable="w0", shards=(PSSync(server="n1"),)),
            VariableStrategy(variable="w1", shards=(PSSync(server="n0"),)),
        )
    )
    t = compute.layer_times(model, cluster.device_type(0), 32, P)
    fwd, b0, b1 = float(t.fwd.sum()), float(t.bwd[0]), float(t.bwd[1])
    t_comp, d = fwd + b0 + b1, 1.85e-3
    for combine in ("sum", "max"):
        params = replace(P, combine=combine)
        got = cost_breakdown(model, cluster, s, params).t_iter
        assert got == pytest.approx(reference_cost(model, cluster, s, params).t_iter)
    # "max": w0's server starts at T_comp and ends d later; w1's server ends at fwd + b1 + d.
    assert cost_breakdown(model, cluster, s, replace(P, combine="max")).t_iter == pytest.approx(t_comp + d)
    # "sum": one channel; each shard counts d · T_ps / Σ T_server = d / 2: max(T_comp, fwd + b1 + d/2) + d/2.
    want = max(t_comp, fwd + b1 + d / 2) + d / 2
    assert cost_breakdown(model, cluster, s, P).t_iter == pytest.approx(want)
