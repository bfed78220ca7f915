"""The baselines (AutoSync §8) are valid strategies for every zoo model on every zoo cluster."""

from __future__ import annotations

import pytest

from simulator import zoo
from simulator.analytical import BASELINES, CostParams, baseline, cost_breakdown
from simulator.analytical.baselines import (
    FUSION_RANGE,
    PARTITION_RANGE,
    allreduce_single,
    horovod,
    ps,
    ps_naive,
)
from simulator.analytical.testing import make_cluster, make_model
from simulator.spec import CollectiveSync, PSSync, Variable


def test_every_baseline_is_valid_on_every_zoo_pair() -> None:
    models, clusters = zoo.model_names(), zoo.cluster_names()
    assert models and clusters, "the zoo is empty: datasets/models or datasets/clusters has no spec"
    for mn in models:
        model = zoo.model(mn)
        for cn in clusters:
            cluster = zoo.cluster(cn)
            # The tuned builders at the ends of their knobs' ranges: the most buckets (every
            # variable alone) and the most partitioned variables, the cases that can go wrong.
            for s in (
                horovod(model, cluster, FUSION_RANGE[0], hierarchical=True),
                ps(model, cluster, PARTITION_RANGE[0]),
                ps_naive(model, cluster),
                allreduce_single(model, cluster),
            ):
                s.check(model, cluster)


@pytest.mark.parametrize("name", BASELINES)
def test_baseline_by_name_is_valid_and_deterministic(name: str) -> None:
    model, cluster = zoo.model("BERT-base"), zoo.cluster("B7")
    s = baseline(name, model, cluster, trials=4, seed=1)
    s.check(model, cluster)
    assert s.name == name
    assert baseline(name, model, cluster, trials=4, seed=1) == s


def test_unknown_baseline() -> None:
    with pytest.raises(ValueError, match="unknown baseline"):
        baseline("nccl", zoo.model("BERT-3L"), zoo.cluster("B7"))


def test_horovod_buckets_adjacent_variables_in_backprop_order() -> None:
    # 4 variables of 1 MB each (v0..v3); threshold 2.5 MB: back-prop order v3, v2 | v1, v0.
    vs = [Variable(name=f"v{i}", shape=(1000, 250)) for i in range(4)]
    model, cluster = make_model(vs), make_cluster([1, 1])
    s = horovod(model, cluster, threshold=2.5e6)
    groups = {
        vs_.variable: vs_.shards[0].group for vs_ in s.variables if isinstance(vs_.shards[0], CollectiveSync)
    }
    assert groups == {"v3": 0, "v2": 0, "v1": 1, "v0": 1}


def test_tuned_horovod_is_no_worse_than_its_range_ends() -> None:
    model, cluster = zoo.model("BERT-base"), zoo.cluster("B7")
    p = CostParams()
    tuned = cost_breakdown(model, cluster, baseline("horovod", model, cluster, p, trials=16), p).t_sync
    small = cost_breakdown(model, cluster, horovod(model, cluster, FUSION_RANGE[0]), p).t_sync
    assert tuned <= small


def test_ps_balances_by_bandwidth_and_reduces_locally() -> None:
    # Two 4-GPU nodes, one with a NIC twice as fast: it should get about twice the bytes.
    vs = [Variable(name=f"v{i}", shape=(100 * (i + 1), 100)) for i in range(12)]
    model = make_model(vs)
    cluster = make_cluster([4, 4], nic_gbps=[10.0, 20.0])
    s = ps(model, cluster, threshold=float("inf"))
    load = {"n0": 0.0, "n1": 0.0}
    for vs_ in s.variables:
        sync = vs_.shards[0]
        assert isinstance(sync, PSSync) and sync.local_replication
        load[sync.server] += model.variable(vs_.variable).bytes
    assert load["n1"] / load["n0"] == pytest.approx(2.0, rel=0.15)
    # Variables over the threshold are split, one shard per node.
    split = ps(model, cluster, threshold=200_000)
    big = [vs_ for vs_ in split.variables if model.variable(vs_.variable).bytes > 200_000]
    assert big and all(vs_.partition.shards == 2 for vs_ in big)
