"""Algorithms 1 and 2 on hand-worked inputs, and the size of a hand-countable space."""

from __future__ import annotations

import math

import numpy as np
import pytest

from search.constraints import adjacent_merge, load_balance
from search.space import Space, SpaceConfig, compressor_kinds
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Variable


def test_adjacent_merge_hand_worked() -> None:
    # total 12, N = 3 -> l_avg 4: [4] | [1, 1, 2] | [2, 2]
    assert adjacent_merge(np.array([4.0, 1, 1, 2, 2, 2]), 3).tolist() == [0, 1, 1, 1, 2, 2]
    # one shard above l_avg swallows two shares: fewer groups come out, ids stay contiguous
    assert adjacent_merge(np.array([9.0, 1, 1, 1]), 3).tolist() == [0, 1, 1, 1]
    assert adjacent_merge(np.array([1.0, 1, 1]), 1).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="n_groups"):
        adjacent_merge(np.array([1.0]), 0)


def test_load_balance_argmax_hand_worked() -> None:
    # bandwidth 1:3, four equal shards: whichever server the tie picks first, loads end at [4, 12]
    for seed in range(10):
        at = load_balance(np.full(4, 4.0), np.array([1.0, 3.0]), np.random.default_rng(seed), temperature=0)
        assert np.bincount(at, weights=np.full(4, 4.0), minlength=2).tolist() == [4.0, 12.0]


def test_load_balance_visits_big_shards_first() -> None:
    # argmax: the 10-byte shard comes first (tie -> random); the two 1-byte shards then go elsewhere
    at = load_balance(np.array([1.0, 10.0, 1.0]), np.array([1.0, 1.0]), np.random.default_rng(0), 0)
    assert at[0] == at[2] != at[1]


def test_load_balance_temperature_spreads_within_tolerance() -> None:
    """Temperature 1 (mean-shard units) randomises yet keeps every server within 3 mean shards."""
    bw = np.array([10.0, 25.0, 50.0])
    placements = set()
    for seed in range(100):
        rng = np.random.default_rng(seed)
        b = rng.uniform(0.5, 1.5, size=40) * 1e6
        at = load_balance(b, bw, rng, temperature=1.0)
        placements.add(tuple(at))
        loads = np.bincount(at, weights=b, minlength=3)
        assert np.abs(loads - bw / bw.sum() * b.sum()).max() <= 3 * b.mean()
    assert len(placements) == 100


def test_space_size_hand_counted() -> None:
    """One 16-byte float32 vector on one 1-GPU node: per N, 2 PS choices (server x replication)
    + N groups x 2 compressors (none, fp16) x 2 algorithms; N = 1..16: 32 + 4 * 136 = 576."""
    t = DeviceType(name="g", fp32_tflops=1, fp16_tflops=1, memory_gb=1, memory_bw_gbs=1)
    cluster = ClusterSpec(
        name="one",
        device_types=(t,),
        nodes=(Node(name="a", device="g", gpus=1, nic_gbps=1),),
        intra_node_gbps=1,
    )
    layer = Layer(
        name="l", kind="x", fwd_flops=1, activation_bytes=1, variables=(Variable(name="v", shape=(4,)),)
    )
    model = ModelSpec(name="m", batch_size=1, layers=(layer,))
    lossy = SpaceConfig(compressors=compressor_kinds("all"))
    assert Space(model, cluster, lossy).log10_size() == pytest.approx(math.log10(576))
    assert Space(
        model, cluster, SpaceConfig(max_groups=1, compressors=lossy.compressors)
    ).log10_size() == pytest.approx(math.log10(2 + 4))
    # The default space is lossless: per N, 2 PS choices + N groups x 1 compressor x 2 algorithms.
    assert Space(model, cluster).log10_size() == pytest.approx(math.log10(32 + 2 * 136))


def test_partition_bounds(model: ModelSpec, cluster: ClusterSpec) -> None:
    sp = Space(model, cluster)
    by_name = {vs.name: vs for vs in sp.variables}
    assert by_name["emb.w"].k_max == {0: 16}  # sparse: axis 0 only
    assert by_name["fc0.b"].k_max == {}  # 4 KiB: below 2 x min_shard_bytes
    assert by_name["fc0.w"].k_max == {0: 4, 1: 4}  # 1 MiB / 256 KiB = 4
    assert by_name["vec.w"].k_max == {0: 16}
