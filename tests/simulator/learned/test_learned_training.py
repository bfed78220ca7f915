"""The training loop, on synthetic labels from the analytical model (a unit test, not accuracy).

The labels are the analytical model's own predictions with 3% noise; the simulator sees the
analytical estimate among its features, so learning them is easy. These tests only prove that
the loop optimises (loss goes down), that selection uses validation, and that a trained network
orders held-out strategies better than chance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simulator.learned.data import Domain, encode
from simulator.learned.train import TrainConfig, evaluate, fine_tune, fit, ranking_loss

from .conftest import synthetic_domain, toy_cluster, toy_model


def test_ranking_loss_hand_worked() -> None:
    out = torch.tensor([0.0, 1.0])
    # Strategy 1 is slower and scored higher by 1: one pair, loss softplus(-1).
    assert float(ranking_loss(out, torch.tensor([0.0, 2.0]))) == pytest.approx(
        np.log1p(np.exp(-1.0)), rel=1e-5
    )
    # Wrong order costs more.
    assert float(ranking_loss(out, torch.tensor([2.0, 0.0]))) == pytest.approx(
        np.log1p(np.exp(1.0)), rel=1e-5
    )
    assert float(ranking_loss(out, torch.tensor([1.0, 1.0]))) == 0.0


@pytest.mark.parametrize(("kind", "loss"), [("rnn", "rank"), ("gat", "rank"), ("rnn", "mse")])
def test_training_reduces_loss_and_ranks_better_than_chance(domain: Domain, kind: str, loss: str) -> None:
    train, val, test = domain.split(0)
    # A short schedule at a higher learning rate: the full recipe runs in the benchmark.
    cfg = TrainConfig(kind=kind, loss=loss, epochs=12, lr=1e-2, hidden=16, eval_every=2, milestones=(8,))  # type: ignore[arg-type]
    result = fit([encode(train)], [encode(val)], cfg)
    losses = [h[1] for h in result.history]
    assert losses[-1] < losses[0]
    assert result.best_epoch in [h[0] for h in result.history]
    # The kept epoch is the one with the best validation accuracy.
    assert max(h[2] for h in result.history) == pytest.approx(
        next(h[2] for h in result.history if h[0] == result.best_epoch)
    )
    if loss == "rank":
        assert evaluate(result.simulator, encode(test)).pairwise_accuracy > 0.7


def test_linear_ranker_ranks_better_than_chance(domain: Domain) -> None:
    train, val, test = domain.split(0)
    sim = fit([encode(train)], [encode(val)], TrainConfig(kind="linear")).simulator
    assert evaluate(sim, encode(test)).pairwise_accuracy > 0.7


def test_fine_tune_on_a_new_domain_changes_the_network_and_keeps_the_base() -> None:
    source = encode(synthetic_domain(toy_model(), toy_cluster(), 40, seed=3))
    target = encode(synthetic_domain(toy_model("wide", width=96), toy_cluster("fast", nic=40.0), 30, seed=4))
    cfg = TrainConfig(kind="gat", epochs=2, hidden=8)
    base = fit([source], [], cfg).simulator
    before = base.outputs(target.graphs).copy()
    tuned = fine_tune(base, [source], target.subset(range(10)), cfg, epochs=3)
    assert not np.allclose(tuned.outputs(target.graphs), before)
    np.testing.assert_allclose(base.outputs(target.graphs), before)
