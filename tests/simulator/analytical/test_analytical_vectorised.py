"""The vectorised scorer agrees with the reference loop on random strategies; batches round-trip."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.analytical import (
    OP_NAMES,
    CostParams,
    cluster_arrays,
    decode,
    encode,
    make_batch,
    model_arrays,
    score,
)
from simulator.analytical.arrays import ALGORITHMS, COMPRESSORS
from simulator.analytical.batch import StrategyBatch
from simulator.analytical.reference import reference_cost
from simulator.analytical.testing import make_cluster, mixed_model, random_strategies
from simulator.spec import ClusterSpec

PARAMS = [
    CostParams(),
    CostParams(phi=3e-4, delta=1e-5, efficiency=0.2, combine="max"),
    CostParams(call_overhead_s=8e-4, ps_round_s=1.2e-3),  # measured α (the testbed's probe)
    CostParams(call_overhead_s=8e-4, ps_round_s=1.2e-3, allgather_call_s=2.5e-3),
    CostParams(call_overhead_s=5e-4, ps_round_s=1.2e-3, allgather_call_s=2.5e-3, unit_overhead_s=6e-4),
]


CLUSTERS: dict[str, ClusterSpec] = {
    "two-nodes": make_cluster([1, 1]),
    "uneven-with-cpu-server": make_cluster(
        [4, 1, 2, 0], nic_gbps=[25.0, 10.0, 50.0, 40.0], single_flow_gbps=20.0
    ),
    "one-node": make_cluster([4]),
}


@pytest.mark.parametrize("cluster_name", sorted(CLUSTERS))
@pytest.mark.parametrize(
    "params", PARAMS, ids=["default", "max", "measured-alpha", "measured-allgather", "unit-overhead"]
)
def test_vectorised_matches_reference(cluster_name: str, params: CostParams) -> None:
    model, cluster = mixed_model(), CLUSTERS[cluster_name]
    strategies = random_strategies(model, cluster, 60, seed=7)
    for s in strategies:
        s.check(model, cluster)
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    b = encode(ma, ca, strategies)
    got = score(ma, ca, b, params, detail=True)
    for n, s in enumerate(strategies):
        ref = reference_cost(model, cluster, s, params)
        for name in ("t_comp", "t_ps", "t_cc", "t_sync", "t_iter"):
            assert getattr(got, name)[n] == pytest.approx(getattr(ref, name), rel=1e-9, abs=0.0), name
        for j, t in ref.server_time.items():
            assert got.server_time[n, j] == pytest.approx(t, rel=1e-9)
        calls = {_call_key(b, g): got.call_time[g] for g in np.flatnonzero(b.call_strategy == n)}
        assert calls.keys() == ref.call_time.keys()
        for key, t in ref.call_time.items():
            assert calls[key] == pytest.approx(t, rel=1e-9)
    assert got.sync_terms is not None
    if params.call_overhead_s is None and params.ps_round_s is None:  # else α is measured, not φ/δ
        lin = got.sync_terms @ np.array([1.0, params.phi, params.delta])
        np.testing.assert_allclose(lin, got.t_sync, rtol=1e-9)


def _call_key(b: StrategyBatch, g: int) -> tuple[int, str, str, int | None, bool]:
    """The reference's key of call ``g``: its unit (``comm.unit_key``) and whether it is sparse."""
    row = int(np.flatnonzero(b.call == g)[0])
    rank = int(b.rank[row]) or None
    sparse = OP_NAMES[int(b.call_op[g])] == "allgather"
    return (
        int(b.call_group[g]),
        ALGORITHMS[int(b.algorithm[row])],
        COMPRESSORS[int(b.compressor[row])],
        rank,
        sparse,
    )


def test_real_zoo_cluster_agreement() -> None:
    from simulator import zoo

    names = zoo.cluster_names()
    assert names, "the zoo has no clusters"
    model = mixed_model()
    for name in names:
        cluster = zoo.cluster(name)
        strategies = random_strategies(model, cluster, 5, seed=1)
        ma, ca = model_arrays(model), cluster_arrays(cluster)
        got = score(ma, ca, encode(ma, ca, strategies), CostParams())
        want = [reference_cost(model, cluster, s, CostParams()).t_iter for s in strategies]
        np.testing.assert_allclose(got.t_iter, want, rtol=1e-9, err_msg=name)


def test_decode_inverts_encode() -> None:
    model, cluster = mixed_model(), CLUSTERS["uneven-with-cpu-server"]
    strategies = random_strategies(model, cluster, 10, seed=3)
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    b = encode(ma, ca, strategies)
    for n, s in enumerate(strategies):
        back = decode(ma, ca, b, n, name=s.name)
        assert back.variables == s.variables


def test_make_batch_rejects_unsorted_rows() -> None:
    model, cluster = mixed_model(), CLUSTERS["two-nodes"]
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    b = encode(ma, ca, random_strategies(model, cluster, 2, seed=0))
    fields = {
        k: getattr(b, k)[::-1]
        for k in (
            *("strategy", "variable", "axis", "num_shards", "shard_index", "is_ps", "server"),
            *("local_replication", "staleness", "group", "algorithm", "compressor", "rank"),
        )
    }
    with pytest.raises(ValueError, match="strategy"):
        make_batch(ma, ca, **fields)


def test_encode_rejects_plans() -> None:
    model, cluster = mixed_model(), CLUSTERS["two-nodes"]
    s = random_strategies(model, cluster, 1)[0]
    from simulator.spec import Plan, Stage

    plan = Plan(
        stages=(Stage(first_layer=0, last_layer=len(model.layers), devices=("n0:0",)),),
        global_batch=32,
        batch_shares={"n0:0": 32},
        micro_batch_size=32,
        num_micro_batches=1,
    )
    with pytest.raises(ValueError, match="plan"):
        encode(model_arrays(model), cluster_arrays(cluster), [s.model_copy(update={"plan": plan})])


@pytest.mark.parametrize(
    ("field", "value"),
    [("variable", 99), ("server", 7), ("num_shards", 0), ("compressor", 5), ("axis", 9)],
)
def test_make_batch_names_the_out_of_range_field(field: str, value: int) -> None:
    model, cluster = mixed_model(), CLUSTERS["two-nodes"]
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    b = encode(ma, ca, random_strategies(model, cluster, 3, seed=0))
    names = ("strategy", "variable", "axis", "num_shards", "shard_index", "is_ps", "server")
    names += ("local_replication", "staleness", "group", "algorithm", "compressor", "rank")
    fields = {k: getattr(b, k).copy() for k in names}
    row = int(np.flatnonzero(b.is_ps if field == "server" else ~b.is_ps)[0])
    fields[field][row] = value
    with pytest.raises(ValueError, match=f"^{field}: row {row}"):
        make_batch(ma, ca, **fields)
