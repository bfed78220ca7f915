"""Ranking 3D plans of a GPT on one zoo node: enumeration, memory filter, order."""

from __future__ import annotations

import pytest

from search.hybrid import enumerate_plans, rank_plans
from search.hybrid.threed import node_of
from simulator import zoo
from simulator.threed import A100_NVSWITCH, GPTConfig

SMALL = GPTConfig(hidden=1024, heads=16, layers=24)
BIG = GPTConfig(hidden=4096, heads=32, layers=32)  # ~6.7 B parameters


def test_enumeration_covers_the_vocabulary_and_only_valid_plans() -> None:
    plans = enumerate_plans(SMALL, 8, 32)
    assert all(p.gpus == 8 and p.global_batch == 32 for p in plans)
    assert all(p.dp > 1 for p in plans if p.zero_stage)
    assert {(p.tp, p.pp) for p in plans} == {
        (1, 1),
        (1, 2),
        (1, 4),
        (1, 8),
        (2, 1),
        (2, 2),
        (2, 4),
        (4, 1),
        (4, 2),
        (8, 1),
    }
    assert {p.zero_stage for p in plans} == {0, 1, 2, 3}
    assert {p.recompute for p in plans} == {"none", "selective", "full"}
    assert {p.micro_batch for p in plans} == {1, 2, 4, 8}


def test_a100_node_uses_the_published_curve() -> None:
    device, gpus, comms = node_of(zoo.cluster("A100-40GBx8"))
    assert (device.name, gpus, comms.curve) == ("A100-SXM4-40GB", 8, A100_NVSWITCH)
    _, _, pcie = node_of(zoo.cluster("L4x8"))
    assert pcie.curve.busbw_max == pytest.approx(0.7 * 252 / 8 * 1e9)


def test_ranking_is_by_time_and_drops_oom() -> None:
    ranked = rank_plans(BIG, zoo.cluster("L40Sx8"), 16)
    assert ranked, "some plan of a 6.7B GPT fits 8 x 48 GB"
    assert all(r.memory.fits for r in ranked)
    times = [r.seconds for r in ranked]
    assert times == sorted(times)
    # plain data parallelism keeps 16 B/param x 6.7e9 = 107 GB per GPU: never proposed
    assert not any(r.plan.tp == 1 and r.plan.pp == 1 and r.plan.zero_stage == 0 for r in ranked)
    everything = rank_plans(BIG, zoo.cluster("L40Sx8"), 16, keep_oom=True)
    assert len(everything) > len(ranked)
    fits = [r.memory.fits for r in everything]
    assert fits == sorted(fits, reverse=True)  # every fitting plan before every OOM one


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="gpus"):
        rank_plans(SMALL, zoo.cluster("A100x8"), 8, gpus=16)
    with pytest.raises(ValueError, match="global_batch"):
        rank_plans(SMALL, zoo.cluster("A100x8"), 0)
