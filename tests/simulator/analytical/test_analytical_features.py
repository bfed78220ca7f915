"""Features: shapes, the z_i decomposition summing back to Eq. 2/3, and the global max ⊕ mean."""

from __future__ import annotations

import numpy as np

from simulator.analytical import (
    GLOBAL_FEATURES,
    RAW_FEATURES,
    AnalyticalSimulator,
    CostParams,
    cluster_arrays,
    encode,
    features,
    model_arrays,
    score,
)
from simulator.analytical.testing import make_cluster, make_model, random_strategies
from simulator.spec import CollectiveSync, PSSync, Strategy, Variable, VariableStrategy


def setup():  # type: ignore[no-untyped-def]
    model = make_model(
        [
            Variable(name="emb", shape=(4000, 16), sparse=True, density=0.1),
            Variable(name="a", shape=(300, 100)),
            Variable(name="b", shape=(100,)),
            Variable(name="c", shape=(200, 50, 3)),
        ]
    )
    cluster = make_cluster([2, 2, 0], nic_gbps=[10.0, 25.0, 40.0])
    return model, cluster


def test_shapes_and_names() -> None:
    model, cluster = setup()
    ss = random_strategies(model, cluster, 12, seed=5)
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    b = encode(ma, ca, ss)
    feats = features(ma, ca, b)
    t = b.rows
    assert feats.shard_z.shape == (t, 3)
    assert feats.shard_raw.shape == (t, len(RAW_FEATURES))
    assert feats.global_z.shape == (12, len(GLOBAL_FEATURES)) == (12, 12)
    assert np.isfinite(feats.shard_raw).all() and np.isfinite(feats.global_z).all()
    np.testing.assert_array_equal(feats.offsets, b.offsets)
    np.testing.assert_array_equal(feats.shard_raw[:, RAW_FEATURES.index("z_transfer")], feats.shard_z[:, 0])


def test_shard_z_sums_to_the_cost_terms() -> None:
    model, cluster = setup()
    ss = random_strategies(model, cluster, 20, seed=9)
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    b = encode(ma, ca, ss)
    feats = features(ma, ca, b)
    sc = score(ma, ca, b, CostParams(), detail=True)
    assert sc.server_terms is not None and sc.call_terms is not None
    z = feats.shard_z
    for n in range(b.size):
        rows = np.arange(b.offsets[n], b.offsets[n + 1])
        cc = rows[~b.is_ps[rows]]
        want_cc = sc.call_terms[b.call_strategy == n].sum(axis=0)
        np.testing.assert_allclose(z[cc].sum(axis=0), want_cc, rtol=1e-12, atol=1e-15)
        for j in range(len(cluster.nodes)):
            on_j = rows[b.is_ps[rows] & (b.server[rows] == j)]
            np.testing.assert_allclose(z[on_j].sum(axis=0), sc.server_terms[n, j], rtol=1e-12, atol=1e-15)


def test_global_z_is_max_and_mean_by_kind() -> None:
    # Hand check: two PS shards on n1 with z = [t1, 4 msgs, 1] and [t2, 4, 1]; one collective shard.
    model = make_model(
        [
            Variable(name="a", shape=(100, 10)),
            Variable(name="b", shape=(300, 10)),
            Variable(name="c", shape=(10,)),
        ]
    )
    cluster = make_cluster([2, 2], nic_gbps=10.0)
    s = Strategy(
        variables=(
            VariableStrategy(variable="a", shards=(PSSync(server="n1"),)),
            VariableStrategy(variable="b", shards=(PSSync(server="n1"),)),
            VariableStrategy(variable="c", shards=(CollectiveSync(),)),
        )
    )
    g = AnalyticalSimulator().hidden(model, cluster, [s])[0]
    # a: 4000 bytes; b: 12000 bytes; from n0's 2 GPUs to n1, both ways: 2·2·bytes/1.25e9.
    t_a, t_b = 4 * 4000 / 1.25e9, 4 * 12000 / 1.25e9
    np.testing.assert_allclose(g[:3], [t_b, 4.0, 1.0])  # ps max
    np.testing.assert_allclose(g[3:6], [(t_a + t_b) / 2, 4.0, 1.0])  # ps mean
    # c: 40 bytes all-reduced over w = 4 GPUs, ring bounded by the 10 Gbit/s link: 2·3/4·40/1.25e9.
    np.testing.assert_allclose(g[6:9], [1.5 * 40 / 1.25e9, 4.0, 1.0])
    np.testing.assert_allclose(g[9:12], g[6:9])


def test_simulator_contract() -> None:
    model, cluster = setup()
    ss = random_strategies(model, cluster, 7, seed=2)
    sim = AnalyticalSimulator()
    t = sim.predict(model, cluster, ss)
    h = sim.hidden(model, cluster, ss)
    assert t.shape == (7,) and t.dtype == np.float64 and np.all(np.isfinite(t)) and np.all(t > 0)
    assert h.shape == (7, 12) and h.dtype == np.float64
    assert sim.predict(model, cluster, []).shape == (0,)
    assert sim.hidden(model, cluster, []).shape == (0, 12)


def test_a_batch_without_any_collective_call() -> None:
    """All-PS strategies alone: the same features as when a collective strategy shares the batch."""
    model, cluster = setup()
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    all_ps = Strategy(
        variables=[VariableStrategy(variable=v.name, shards=[PSSync(server="n1")]) for v in model.variables]
    )
    all_cc = Strategy(
        variables=[
            VariableStrategy(variable=v.name, shards=[CollectiveSync(group=0)]) for v in model.variables
        ]
    )
    alone = features(ma, ca, encode(ma, ca, [all_ps]))
    mixed = features(ma, ca, encode(ma, ca, [all_ps, all_cc]))
    rows = len(model.variables)
    np.testing.assert_array_equal(alone.shard_z, mixed.shard_z[:rows])
    np.testing.assert_array_equal(alone.shard_raw, mixed.shard_raw[:rows])
    np.testing.assert_array_equal(alone.global_z[0], mixed.global_z[0])
