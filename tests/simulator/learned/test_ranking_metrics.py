"""Ranking metrics against hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.metrics import kendall_tau, pairwise_accuracy, ranking_metrics, resolved_pairs, top_k_regret


def test_pairwise_accuracy_hand_worked() -> None:
    measured = np.array([1.0, 2.0, 3.0, 4.0])
    # Pairs (6): swap of the last two is the only wrong one.
    assert pairwise_accuracy(np.array([10.0, 20.0, 40.0, 30.0]), measured) == pytest.approx(5 / 6)
    assert pairwise_accuracy(measured * 7, measured) == 1.0
    assert pairwise_accuracy(-measured, measured) == 0.0


def test_pairwise_accuracy_ties() -> None:
    # Measured tie (0,1) is skipped; predicted tie on (1,2) counts half: pairs (0,2) ok, (1,2) 0.5.
    assert pairwise_accuracy(np.array([1.0, 2.0, 2.0]), np.array([1.0, 1.0, 3.0])) == pytest.approx(0.75)
    assert math.isnan(pairwise_accuracy(np.array([1.0, 2.0]), np.array([5.0, 5.0])))


def test_kendall_tau_hand_worked() -> None:
    measured = np.array([1.0, 2.0, 3.0, 4.0])
    # 5 concordant, 1 discordant: tau = (5 - 1) / 6.
    assert kendall_tau(np.array([10.0, 20.0, 40.0, 30.0]), measured) == pytest.approx(4 / 6)
    assert kendall_tau(-measured, measured) == pytest.approx(-1.0)


def test_top_k_regret_hand_worked() -> None:
    measured = np.array([1.0, 1.2, 1.5, 2.0, 3.0, 4.0, 5.0])
    predicted = np.array([9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # true best ranked last
    # Predicted top 5 = indices 1..5; their best measured 1.2 vs true best 1.0 -> 0.2.
    assert top_k_regret(predicted, measured, k=5) == pytest.approx(0.2)
    assert top_k_regret(predicted, measured, k=7) == 0.0
    assert top_k_regret(measured, measured, k=1) == 0.0


def test_ranking_metrics_bundle_and_errors() -> None:
    m = ranking_metrics(np.array([3.0, 1.0, 2.0]), np.array([3.0, 1.0, 2.0]))
    assert m.as_dict() == {"pairwise_accuracy": 1.0, "kendall_tau": pytest.approx(1.0), "top5_regret": 0.0}
    with pytest.raises(ValueError, match="shape"):
        pairwise_accuracy(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="finite"):
        kendall_tau(np.array([1.0, np.nan]), np.array([1.0, 2.0]))


def test_min_gap_keeps_only_pairs_the_measurement_resolves() -> None:
    # Measured 1.00, 1.02, 2.00: the first two are 2 % apart. The prediction swaps them and
    # orders the rest right: all pairs 2/3, pairs more than 5 % apart 2/2.
    measured = np.array([1.00, 1.02, 2.00])
    predicted = np.array([1.1, 1.0, 3.0])
    assert pairwise_accuracy(predicted, measured) == pytest.approx(2 / 3)
    assert pairwise_accuracy(predicted, measured, min_gap=0.05) == pytest.approx(1.0)
    assert resolved_pairs(measured, 0.05) == pytest.approx(2 / 3)
    assert np.isnan(pairwise_accuracy(predicted[:2], measured[:2], min_gap=0.05))
