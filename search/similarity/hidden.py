"""Hidden-representation similarity (AutoSync supplementary §7, second approach): cosine of hidden outputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from search.similarity.base import Similarity
from simulator.base import Simulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy


class HiddenSimilarity(Similarity):
    """cos(h(S_i), h(S_j)) with h = ``simulator.hidden`` (works with any Simulator).

    Cosine lies in [-1, 1]; representations after a ReLU (the usual case) give [0, 1]. A zero
    hidden vector has similarity 0 to everything, itself included.
    """

    name = "hidden"

    def __init__(self, simulator: Simulator, model: ModelSpec, cluster: ClusterSpec) -> None:
        self.simulator = simulator
        self.model = model
        self.cluster = cluster

    def embed(self, strategies: Sequence[Strategy]) -> np.ndarray:
        """Unit-normalised hidden vectors, shape (N, H)."""
        h = np.asarray(self.simulator.hidden(self.model, self.cluster, strategies), dtype=np.float64)
        if h.ndim != 2 or len(h) != len(strategies):
            raise ValueError(
                f"{self.simulator.name}.hidden returned shape {h.shape}, expected ({len(strategies)}, H)"
            )
        norm = np.linalg.norm(h, axis=1, keepdims=True)
        return np.divide(h, norm, out=np.zeros_like(h), where=norm > 0)

    def between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a @ b.T
