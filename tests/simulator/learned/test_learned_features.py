"""Shard features and transformed-graph edges of the learned simulators."""

from __future__ import annotations

import numpy as np

from simulator.learned.data import Domain
from simulator.learned.features import (
    NUM_GLOBAL_FEATURES,
    NUM_SHARD_FEATURES,
    SHARD_FEATURE_NAMES,
    FeatureExtractor,
)
from simulator.learned.graph import shard_edges, variable_edges
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    ModelSpec,
    Partition,
    PSSync,
    Strategy,
    VariableStrategy,
    strategy_key,
)

from .conftest import random_strategy, toy_model


def test_variable_edges_contract_variable_less_layers() -> None:
    # emb(0) -> fc0(1 w, 2 b) -> act0 -> fc1(3 w, 4 b) -> act1
    assert variable_edges(toy_model(depth=2)) == (
        (0, 1),
        (0, 2),
        (1, 2),
        (1, 3),
        (1, 4),
        (2, 3),
        (2, 4),
        (3, 4),
    )


def test_shard_edges_link_shards_of_adjacent_variables_and_chain_a_variable() -> None:
    var_of = np.array([0, 0, 1])  # variable 0 in two shards, variable 1 whole
    e = shard_edges(var_of, ((0, 1),))
    pairs = {(int(a), int(b)) for a, b in e.T}
    assert pairs == {(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)}


def _uniform(model: ModelSpec, sync: PSSync | CollectiveSync, shards: int = 1) -> Strategy:
    return Strategy(
        variables=tuple(
            VariableStrategy(
                variable=v.name,
                partition=Partition(shards=shards if v.shape[0] >= shards else 1),
                shards=(sync,) * (shards if v.shape[0] >= shards else 1),
            )
            for v in model.variables
        )
    )


def test_feature_shapes_and_values(model: ModelSpec, cluster: ClusterSpec) -> None:
    fx = FeatureExtractor(model, cluster)
    g = fx(_uniform(model, PSSync(server="s"), shards=2))
    n_shards = 2 * len(model.variables)
    assert g.x.shape == (n_shards, NUM_SHARD_FEATURES) and g.x.dtype == np.float32
    assert g.z.shape == (NUM_GLOBAL_FEATURES,)
    assert np.isfinite(g.x).all() and np.isfinite(g.z).all()
    col = {n: i for i, n in enumerate(SHARD_FEATURE_NAMES)}
    assert (g.x[:, col["is_ps"]] == 1).all() and (g.x[:, col["is_collective"]] == 0).all()
    # Node s is the best-connected (20 Gbit/s) and has no GPU.
    assert (g.x[:, col["server_bandwidth_rank"]] == 1).all()
    assert (g.x[:, col["server_is_worker"]] == 0).all()
    assert (g.x[:, col["num_shards"]] == 1).all()  # log2(2)
    assert g.edge_index.shape[0] == 2 and g.edge_index.max() < n_shards
    cc = fx(_uniform(model, CollectiveSync(group=0)))
    assert (cc.x[:, col["is_collective"]] == 1).all()
    assert (cc.x[:, col["compressor_none"]] == 1).all()


def test_strategy_totals_are_broadcast_to_every_shard(model: ModelSpec, cluster: ClusterSpec) -> None:
    fx = FeatureExtractor(model, cluster)
    col = {n: i for i, n in enumerate(SHARD_FEATURE_NAMES)}
    rows = 2 * len(model.variables)
    ps = fx(_uniform(model, PSSync(server="s"), shards=2))
    assert np.allclose(ps.x[:, col["ctx_log_shards"]], np.log1p(rows))
    assert np.allclose(ps.x[:, col["ctx_log_ps_shards"]], np.log1p(rows))
    assert np.allclose(ps.x[:, col["ctx_log_collective_shards"]], 0.0)
    assert np.allclose(ps.x[:, col["ctx_log_ps_servers"]], np.log1p(1))
    # Two servers instead of one: same shard count, one more server.
    two = Strategy(
        variables=tuple(
            VariableStrategy(
                variable=v.name, partition=Partition(shards=1), shards=(PSSync(server="s" if i % 2 else "a"),)
            )
            for i, v in enumerate(model.variables)
        )
    )
    assert np.allclose(fx(two).x[:, col["ctx_log_ps_servers"]], np.log1p(2))
    cc = fx(_uniform(model, CollectiveSync(group=0)))
    assert np.allclose(cc.x[:, col["ctx_log_collective_shards"]], np.log1p(len(model.variables)))
    # Halving the bytes sent (fp16) lowers the strategy's total sent volume.
    half = fx(_uniform(model, CollectiveSync(group=0, compressor=Compressor(kind="fp16"))))
    assert (half.x[:, col["ctx_log_sent_mb"]] < cc.x[:, col["ctx_log_sent_mb"]]).all()


def test_slower_network_raises_the_transfer_feature(model: ModelSpec, cluster: ClusterSpec) -> None:
    s = _uniform(model, CollectiveSync(group=0))
    fast = FeatureExtractor(model, cluster)(s)
    slow_cluster = cluster.model_copy(
        update={"nodes": tuple(n.model_copy(update={"nic_gbps": n.nic_gbps / 10}) for n in cluster.nodes)}
    )
    slow = FeatureExtractor(model, slow_cluster)(s)
    col = SHARD_FEATURE_NAMES.index("z_transfer")
    assert (slow.x[:, col] > fast.x[:, col]).all()


def test_split_is_stable_and_disjoint(model: ModelSpec, cluster: ClusterSpec) -> None:
    rng = np.random.default_rng(1)
    strategies = [random_strategy(model, cluster, rng) for _ in range(60)]
    d = Domain.from_measurements(model, cluster, [(s, 1.0 + i) for i, s in enumerate(strategies)])
    train, val, test = d.split(0)
    assert len(train) + len(val) + len(test) == len(d)
    assert not (set(train.keys) & set(test.keys)) and not (set(val.keys) & set(test.keys))
    # Adding records never moves an existing strategy to another split.
    more = [random_strategy(model, cluster, rng) for _ in range(20)]
    d2 = Domain.from_measurements(model, cluster, [(s, 2.0) for s in strategies + more])
    assert set(test.keys) <= set(d2.split(0)[2].keys)
    assert d.split(1)[2].keys != test.keys
    # Labels and names do not change a strategy's identity.
    assert strategy_key(strategies[0]) == strategy_key(strategies[0].model_copy(update={"name": "x"}))


def test_repeated_strategy_merges_to_median(model: ModelSpec, cluster: ClusterSpec) -> None:
    s = _uniform(model, PSSync(server="a"))
    d = Domain.from_measurements(model, cluster, [(s, 1.0), (s, 3.0), (s, 2.5)])
    assert len(d) == 1 and d.times[0] == 2.5
