"""The Searcher interface: ask for strategies to try, tell what they measured (Optuna's ask/tell shape)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.spec import ClusterSpec, ModelSpec, Strategy


@dataclass(frozen=True)
class Observation:
    """A told result: the strategy and its measured (or simulated) iteration time; inf = failed."""

    strategy: Strategy
    time: float


class Searcher(ABC):
    """Proposes strategies for one model on one cluster and learns from their measured times.

    Contract:
    - ``ask(n)`` returns ``n`` strategies that pass ``Strategy.check`` and the memory check;
      they are pending until told. Searchers never measure anything themselves: the caller (the
      service's loop, or a benchmark with a simulator) runs them and calls ``tell``.
    - ``tell(strategies, times)`` accepts any subset of pending strategies, in any order, matched
      by value (a strategy read back from a database matches the one asked). A non-finite time
      (None, nan, inf) is a failed trial. Telling a strategy that was never asked is an error for
      searchers whose model needs the asking context (Optuna's trials), and is recorded as a plain
      observation by the others.
    - Seeded: the same seed and the same sequence of ask/tell calls give the same strategies.
    - Not thread safe: one searcher per search, driven by one thread.
    """

    #: Short name used by the CLI and the benchmark.
    name: str = "searcher"

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, seed: int = 0) -> None:
        self.model = model
        self.cluster = cluster
        self.seed = seed
        self.history: list[Observation] = []

    @abstractmethod
    def ask(self, n: int) -> list[Strategy]:
        """``n`` strategies to try next."""

    def tell(self, strategies: Sequence[Strategy], times: Sequence[float | None]) -> None:
        """Report measured iteration times (seconds) of asked strategies."""
        if len(strategies) != len(times):
            raise ValueError(f"times: {len(times)} values for {len(strategies)} strategies")
        clean = [t if t is not None and math.isfinite(t) else math.inf for t in times]
        for t in clean:
            if t <= 0:
                raise ValueError(f"times: must be > 0 seconds, got {t}")
        self._observe(strategies, clean)
        self.history.extend(Observation(s, t) for s, t in zip(strategies, clean, strict=True))

    def _observe(self, strategies: Sequence[Strategy], times: Sequence[float]) -> None:  # noqa: B027
        """Hook for searchers that learn from results (failed: inf)."""

    def best(self) -> Observation | None:
        """The fastest successful observation so far."""
        ok = [o for o in self.history if math.isfinite(o.time)]
        return min(ok, key=lambda o: o.time) if ok else None
