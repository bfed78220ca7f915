"""AnalyticalSimulator: AutoSync's predefined cost model behind the Simulator interface."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simulator.analytical.arrays import cluster_arrays, model_arrays
from simulator.analytical.batch import StrategyBatch, encode
from simulator.analytical.features import GLOBAL_FEATURES, features
from simulator.analytical.params import CostParams
from simulator.analytical.vectorised import Scores, score
from simulator.base import Simulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy


class AnalyticalSimulator(Simulator):
    """Predicts iteration time with Eq. 1-3 (seconds); ``hidden`` is the global z (N, 12).

    Stateless apart from its frozen ``params``, so safe to share across threads. ``score_batch``
    and ``hidden_batch`` take a pre-encoded ``StrategyBatch`` (the fast path for samplers).
    """

    name = "analytical"
    is_ranker = False

    def __init__(self, params: CostParams | None = None) -> None:
        self.params = params or CostParams()

    def predict(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        """Iteration time T = max(T_comp, T_sync) per strategy, shape (N,)."""
        if not strategies:
            return np.zeros(0)
        return self.score_batch(model, cluster, self.encode(model, cluster, strategies)).t_iter

    def hidden(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        """Global domain-agnostic features z (``features.GLOBAL_FEATURES``), shape (N, 12)."""
        if not strategies:
            return np.zeros((0, len(GLOBAL_FEATURES)))
        return self.hidden_batch(model, cluster, self.encode(model, cluster, strategies))

    def encode(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> StrategyBatch:
        if not strategies:
            raise ValueError("strategies: need at least one strategy")
        return encode(model_arrays(model), cluster_arrays(cluster), strategies)

    def score_batch(self, model: ModelSpec, cluster: ClusterSpec, batch: StrategyBatch) -> Scores:
        """Every time (T_comp, T_sync^PS, T_sync^CC, T) of a pre-encoded batch."""
        return score(model_arrays(model), cluster_arrays(cluster), batch, self.params)

    def hidden_batch(self, model: ModelSpec, cluster: ClusterSpec, batch: StrategyBatch) -> np.ndarray:
        return features(model_arrays(model), cluster_arrays(cluster), batch).global_z
