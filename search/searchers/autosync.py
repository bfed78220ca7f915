"""AutoSync's searcher: constrained sampling, simulator scoring, then diverse selection (Eq. 11)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from search.feasibility import MemoryModel
from search.samplers import ConstrainedSampler, Constraints
from search.searchers.base import Searcher
from search.selection import Selection, select_diverse
from search.similarity import FactorSimilarity, Similarity
from search.space import Space, SpaceConfig
from simulator.base import Simulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy


@dataclass(frozen=True)
class AutoSyncConfig:
    """How one ask round of AutoSync is made."""

    # Strategies sampled and scored per strategy asked (the pool is pool_factor x n, at least pool_min).
    pool_factor: int = 20
    pool_min: int = 100
    # Fraction of the pool, best predicted first, that qualifies for selection (the "filter").
    qualify_fraction: float = 0.25
    # Eq. 11 trade-off between predicted time and similarity (normalised, see search.selection).
    alpha: float = 0.1


class AutoSyncSearcher(Searcher):
    """Sample a pool with the constrained sampler, score it with ``simulator``, keep the best
    ``qualify_fraction`` (the M qualified strategies of §7), and pick ``n`` of them by Eq. 11.

    ``simulator`` may be replaced between rounds (the service retrains it from told results);
    strategies already asked are never asked again. ``last_selection`` keeps the last round's
    Selection (predicted times and pairwise similarities) for display.
    """

    name = "autosync"

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        simulator: Simulator,
        seed: int = 0,
        config: AutoSyncConfig | None = None,
        similarity: Similarity | None = None,
        space: SpaceConfig | None = None,
        constraints: Constraints | None = None,
    ) -> None:
        super().__init__(model, cluster, seed)
        self.simulator = simulator
        self.config = config or AutoSyncConfig()
        self.similarity = similarity or FactorSimilarity(model)
        self.sampler = ConstrainedSampler(
            Space(model, cluster, space), seed, MemoryModel(model, cluster), constraints
        )
        self.last_selection: Selection | None = None
        self._asked: set[str] = set()

    def ask(self, n: int) -> list[Strategy]:
        c = self.config
        pool = [
            s
            for s in self.sampler.sample(max(c.pool_min, c.pool_factor * n))
            if s.model_dump_json() not in self._asked
        ]
        scores = np.asarray(self.simulator.predict(self.model, self.cluster, pool), dtype=np.float64)
        m = max(n, math.ceil(c.qualify_fraction * len(pool)))
        qualified = np.argsort(scores, kind="stable")[:m]
        selection = select_diverse(
            [pool[i] for i in qualified], scores[qualified], min(n, m), c.alpha, self.similarity
        )
        self.last_selection = selection
        self._asked.update(s.model_dump_json() for s in selection.strategies)
        return list(selection.strategies)
