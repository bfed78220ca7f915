"""Pre-training on analytical labels: named as such, labels are Eq. 1-3's, and it sets the start."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simulator.analytical import AnalyticalSimulator, CostParams
from simulator.learned.data import Domain, encode
from simulator.learned.pretrain import LABEL_PREFIX, analytical_labelled, pretrain, pretrain_then_fit
from simulator.learned.train import TrainConfig, evaluate
from simulator.spec import ClusterSpec, ModelSpec

from .conftest import random_strategy


def test_labels_are_the_analytical_models_and_the_set_says_so(model: ModelSpec, cluster: ClusterSpec) -> None:
    rng = np.random.default_rng(3)
    strategies = [random_strategy(model, cluster, rng) for _ in range(12)]
    params = CostParams(phi=2.5e-4, delta=1e-6, efficiency=0.3)
    labelled = analytical_labelled(model, cluster, strategies, params)
    assert labelled.name == LABEL_PREFIX + f"{model.name}__{cluster.name}"
    np.testing.assert_allclose(
        labelled.times, AnalyticalSimulator(params).predict(model, cluster, strategies)
    )
    assert not np.allclose(labelled.times, AnalyticalSimulator().predict(model, cluster, strategies))
    with pytest.raises(ValueError, match="strategies"):
        analytical_labelled(model, cluster, [], params)


def test_pretrain_refuses_measured_data_and_the_linear_ranker(domain: Domain) -> None:
    with pytest.raises(ValueError, match="not an analytical-label set"):
        pretrain([encode(domain)], TrainConfig(kind="gat", epochs=1), epochs=1)
    rng = np.random.default_rng(0)
    labelled = analytical_labelled(
        domain.model, domain.cluster, [random_strategy(domain.model, domain.cluster, rng) for _ in range(8)]
    )
    with pytest.raises(ValueError, match="linear"):
        pretrain([labelled], TrainConfig(kind="linear"), epochs=1)


@pytest.mark.parametrize("kind", ["gat", "rnn"])
def test_pretraining_learns_the_analytical_order_and_measured_training_starts_from_it(
    domain: Domain, kind: str
) -> None:
    rng = np.random.default_rng(7)
    strategies = [random_strategy(domain.model, domain.cluster, rng) for _ in range(96)]
    labelled = analytical_labelled(domain.model, domain.cluster, strategies)
    cfg = TrainConfig(kind=kind, epochs=3, milestones=(), eval_every=1, seed=0)  # type: ignore[arg-type]
    sim = pretrain([labelled], cfg, epochs=25)
    # The toy domain's times are the analytical model's plus 3% noise: a network pre-trained on
    # other strategies' analytical labels already ranks them, before seeing any of them.
    train, val, test = (encode(p) for p in domain.split(0))
    assert evaluate(sim, test).pairwise_accuracy > 0.7
    torch.manual_seed(0)
    result = pretrain_then_fit([train], [val], [labelled], cfg, pretrain_epochs=25)
    assert result.simulator is not sim  # a new network, trained from the pre-trained weights
    assert evaluate(result.simulator, test).pairwise_accuracy > 0.7
