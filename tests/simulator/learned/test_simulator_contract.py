"""One contract over every simulator kind: finite predictions (N,) and hidden (N, H).

The learned simulators here are trained for two epochs on synthetic analytical labels only to
have weights; nothing about their accuracy is claimed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from simulator.analytical import AnalyticalSimulator
from simulator.base import Simulator
from simulator.learned.data import Domain, encode
from simulator.learned.train import TrainConfig, fit
from simulator.spec import ClusterSpec, ModelSpec

from .conftest import random_strategy, toy_cluster, toy_model


def _learned(kind: str, loss: str) -> Callable[[Domain], Simulator]:
    def make(domain: Domain) -> Simulator:
        train, val, _ = domain.split(0)
        cfg = TrainConfig(kind=kind, loss=loss, epochs=2, hidden=8, eval_every=1)  # type: ignore[arg-type]
        return fit([encode(train)], [encode(val)], cfg).simulator

    return make


FACTORIES: dict[str, Callable[[Domain], Simulator]] = {
    "analytical": lambda _d: AnalyticalSimulator(),
    "linear": _learned("linear", "rank"),
    "rnn-rank": _learned("rnn", "rank"),
    "rnn-mse": _learned("rnn", "mse"),
    "gat-rank": _learned("gat", "rank"),
    "gat-mse": _learned("gat", "mse"),
}


@pytest.fixture(scope="module", params=sorted(FACTORIES))
def simulator(request: pytest.FixtureRequest, domain: Domain) -> Simulator:
    return FACTORIES[request.param](domain)


@pytest.mark.parametrize("n", [1, 7])
def test_predict_and_hidden_shapes(
    simulator: Simulator, model: ModelSpec, cluster: ClusterSpec, n: int
) -> None:
    rng = np.random.default_rng(n)
    strategies = [random_strategy(model, cluster, rng) for _ in range(n)]
    p = simulator.predict(model, cluster, strategies)
    h = simulator.hidden(model, cluster, strategies)
    assert p.shape == (n,) and np.isfinite(p).all() and (p > 0).all()
    assert h.ndim == 2 and h.shape[0] == n and h.shape[1] >= 1 and np.isfinite(h).all()
    # Batched and one-by-one agree (no cross-talk between strategies of a batch).
    one = np.array([simulator.predict(model, cluster, [s])[0] for s in strategies])
    np.testing.assert_allclose(p, one, rtol=1e-4)


def test_works_on_an_unseen_domain(simulator: Simulator) -> None:
    # Features are domain-agnostic: a model and cluster never trained on still get predictions.
    model, cluster = toy_model("wide", width=96, depth=3), toy_cluster("fast", nic=40.0)
    strategies = [random_strategy(model, cluster, np.random.default_rng(5)) for _ in range(3)]
    p = simulator.predict(model, cluster, strategies)
    assert p.shape == (3,) and np.isfinite(p).all() and (p > 0).all()
    assert simulator.hidden(model, cluster, strategies).shape[0] == 3
