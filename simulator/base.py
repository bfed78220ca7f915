"""The one interface every cost predictor implements: analytical models and learned simulators."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from simulator.spec import ClusterSpec, ModelSpec, Strategy


class Simulator(ABC):
    """Predicts the iteration time of strategies of one model on one cluster.

    Contract:
    - ``predict`` returns a float64 array of shape (N,) for N strategies, finite and > 0, in
      seconds (learned simulators trained on a ranking loss return a score on the same scale
      ordering: lower means faster; ``is_ranker`` says which).
    - ``hidden`` returns a float64 array of shape (N, H): the representation used by the
      similarity function of selection (AutoSync §7, second approach).
    - Strategies are assumed valid for (model, cluster) (``Strategy.check``); a simulator does not
      re-validate them.
    - Implementations are safe to call from several threads once constructed (no mutation on
      predict).
    """

    #: A short name, e.g. 'analytical', 'rnn', 'gat', 'linear'.
    name: str = "simulator"
    #: True when predictions order strategies but are not calibrated seconds.
    is_ranker: bool = False

    @abstractmethod
    def predict(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        """Predicted iteration time (or ranking score) per strategy, shape (N,)."""

    @abstractmethod
    def hidden(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        """Hidden representation per strategy, shape (N, H)."""
