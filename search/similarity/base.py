"""The Similarity interface of diverse selection (AutoSync supplementary §7)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from simulator.spec import Strategy


class Similarity(ABC):
    """A pairwise similarity sim(S_i, S_j) between strategies of one model on one cluster.

    Contract: strategies are first embedded once (``embed``, shape (N, D)); ``between`` compares
    two embedded sets (shape (A, B)). sim(S, S) is the largest value, 1 (except a zero hidden
    vector under cosine, which is 0 to everything); sim is symmetric. Greedy selection asks for one
    row at a time of one embedded set (``rows``), so ``between`` must be cheap for A = 1, or
    ``rows`` may prepare the set once. Implementations are stateless after construction and safe
    to share between threads; what ``rows`` returns is not (it may reuse a buffer).
    """

    #: Short name ('factor', 'hidden').
    name: str = "similarity"

    @abstractmethod
    def embed(self, strategies: Sequence[Strategy]) -> np.ndarray:
        """One row per strategy, shape (N, D)."""

    @abstractmethod
    def between(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Similarities of embedded rows ``a`` (A, D) and ``b`` (B, D), shape (A, B)."""

    def rows(self, embedded: np.ndarray) -> Callable[[int], np.ndarray]:
        """i -> sim(embedded[i], every row of ``embedded``), shape (N,): ``between``'s values.

        Greedy selection asks for a few dozen rows of a few thousand candidates; an implementation
        may prepare ``embedded`` once so that each row is cheap. The default asks ``between``.
        """
        return lambda i: self.between(embedded[i : i + 1], embedded)[0]

    def matrix(self, strategies: Sequence[Strategy]) -> np.ndarray:
        """The (N, N) similarity matrix."""
        e = self.embed(strategies)
        return self.between(e, e)

    def pair(self, a: Strategy, b: Strategy) -> float:
        return float(self.between(self.embed([a]), self.embed([b]))[0, 0])
