"""HeterPS's LSTM + REINFORCE scheduler: the batched policies are proper, independent distributions,
and the scheduler reaches the exact solver's money where a single policy used to stop short."""

from __future__ import annotations

import itertools

import pytest
import torch

from search.heterogeneous import ExactScheduler, RLConfig, RLScheduler
from search.heterogeneous.rl import PolicyBank
from simulator import zoo
from simulator.analytical.heterogeneous import HeterogeneousCostModel, Workload


def bank(policies: int = 2, layers: int = 3, types: int = 3) -> tuple[PolicyBank, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(layers, 5, generator=gen)
    return PolicyBank(policies, 5, types, 8, gen), feats


def test_each_policy_is_a_distribution_over_all_schedules() -> None:
    b, feats = bank()
    every = torch.tensor(list(itertools.product(range(3), repeat=3)))  # 27 schedules
    forced = every.expand(2, -1, -1)
    with torch.no_grad():
        _, logp, _ = b.rollout(feats, len(every), forced=forced)
    assert logp.exp().sum(1).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)


def test_sampled_log_probabilities_match_the_forced_ones() -> None:
    b, feats = bank()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        actions, logp, ent = b.rollout(feats, 6, gen)
        _, again, ent2 = b.rollout(feats, 6, forced=actions)
    assert actions.shape == (2, 6, 3) and logp.shape == (2, 6)
    assert torch.allclose(logp, again) and torch.allclose(ent, ent2)
    assert (ent > 0).all()


def test_policies_are_independent() -> None:
    b, feats = bank()
    _, logp, _ = b.rollout(feats, 4, torch.Generator().manual_seed(2))
    logp[0].sum().backward()  # policy 0's objective only
    for p in b.parameters():
        assert p.grad is not None
        assert p.grad[1].abs().sum() == 0 and p.grad[0].abs().sum() > 0


def test_rl_reaches_the_exact_money_where_one_policy_stopped_short() -> None:
    # CTRDNN-12 on four GPU types: the former default (one policy of 32, hidden 64) ends +33 % above the
    # optimum (H100 x2) with the same 7,680 samples; eight policies of 16 reach it
    spec = zoo.model("CTRDNN-12")
    cm = HeterogeneousCostModel(spec, zoo.cluster("HeterPS-4GPU"), Workload(1e5, batch_size=spec.batch_size))
    exact = ExactScheduler().schedule(cm)
    rl = RLScheduler(RLConfig(rounds=60, time_limit=60.0), seed=0).schedule(cm)
    assert rl.money <= exact.money * 1.005
