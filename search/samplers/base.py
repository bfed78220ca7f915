"""The Sampler interface: seeded, reproducible draws of valid strategies from a Space."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from search.feasibility import Feasibility, MemoryModel
from search.samplers.partial import Prior
from search.space import Space
from simulator.spec import Strategy


class InfeasibleSpaceError(RuntimeError):
    """A sampler could not find enough strategies that fit in memory; carries the last reasons."""


@dataclass(frozen=True)
class Rejection:
    """One drawn strategy that failed the memory check, and why."""

    draw: int  # the draw index (the strategy's seed offset)
    feasibility: Feasibility


class Sampler(ABC):
    """Draws strategies of one model on one cluster.

    Contract:
    - Every returned strategy passes ``Strategy.check(model, cluster)`` and, when the sampler has a
      memory model, fits in device and server memory (the rest are kept in ``rejections``).
    - Draw i uses its own generator ``np.random.default_rng([seed, i])``, so the same seed gives
      the same strategies, and ``sample(a) + sample(b)`` equals ``sample(a + b)`` of a fresh
      sampler with that seed.
    - ``prior`` says how the partial strategy's factors are drawn (``search.samplers.partial``).
    - A sampler is stateful (its draw counter) and not thread safe; use one per thread.
    """

    #: Short name used by the CLI, benchmarks and searchers.
    name: str = "sampler"

    def __init__(
        self,
        space: Space,
        seed: int = 0,
        memory: MemoryModel | None = None,
        max_rejections_per_strategy: int = 50,
        prior: Prior = "hierarchical",
    ) -> None:
        self.space = space
        self.prior: Prior = prior
        self.seed = seed
        self.memory = memory
        self.max_rejections_per_strategy = max_rejections_per_strategy
        self.rejections: list[Rejection] = []
        self._draws = 0

    def sample(self, n: int) -> list[Strategy]:
        """``n`` strategies (feasible ones only when a memory model is set)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        out: list[Strategy] = []
        misses = 0
        while len(out) < n:
            i = self._draws
            self._draws += 1
            strategy = self.draw(np.random.default_rng([self.seed, i]))
            if self.memory is not None:
                verdict = self.memory.check(strategy)
                if not verdict.ok:
                    self.rejections.append(Rejection(i, verdict))
                    misses += 1
                    if misses > self.max_rejections_per_strategy * max(n, 1):
                        raise InfeasibleSpaceError(
                            f"{misses} infeasible draws for {len(out)}/{n} strategies; last: "
                            + "; ".join(verdict.reasons)
                        )
                    continue
            out.append(strategy)
        return out

    @abstractmethod
    def draw(self, rng: np.random.Generator) -> Strategy:
        """One strategy from ``rng`` (no memory check)."""
