"""AutoSync's searcher: each ask is one round of ``search.round.run_round`` (the one round)."""

from __future__ import annotations

from dataclasses import dataclass

from search.feasibility import MemoryModel
from search.round import CHUNK, DEFAULTS, RoundDefaults, RoundResult, run_round
from search.samplers import Constraints
from search.samplers.arrays import ArraySampler
from search.searchers.base import Searcher
from search.space import Space, SpaceConfig
from simulator.base import Simulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy


@dataclass(frozen=True)
class AutoSyncConfig:
    """How many strategies one ask samples: M = max(pool_min, pool_factor x n) for n asked.

    Everything else (qualified fraction, alpha, similarity, sampler) is the round's
    ``search.round.DEFAULTS``, the same as the service's and the CLI's.
    """

    pool_factor: int = 20
    pool_min: int = 100

    def __post_init__(self) -> None:
        if self.pool_factor < 1 or self.pool_min < 0:
            raise ValueError(f"pool_factor >= 1 and pool_min >= 0, got {self.pool_factor}, {self.pool_min}")


class AutoSyncSearcher(Searcher):
    """Each ``ask(n)`` runs one round: M constrained samples, scored by ``simulator``, the
    qualified fraction kept, ``n`` chosen by Eq. 11 (``search.round.run_round``).

    The sampler's stream continues across asks (one seeded ``ArraySampler``); strategies already
    asked are excluded from later rounds. ``simulator`` may be replaced between rounds (the service
    retrains it from told results). ``last_selection`` keeps the last round's result (predicted
    times and pairwise similarities) for display.
    """

    name = "autosync"

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        simulator: Simulator,
        seed: int = 0,
        config: AutoSyncConfig | None = None,
        defaults: RoundDefaults = DEFAULTS,
        space: SpaceConfig | None = None,
        constraints: Constraints | None = None,
    ) -> None:
        super().__init__(model, cluster, seed)
        self.simulator = simulator
        self.config = config or AutoSyncConfig()
        self.defaults = defaults
        self.sampler = ArraySampler(
            Space(model, cluster, space),
            seed,
            MemoryModel(model, cluster),
            defaults.sampler,
            constraints if defaults.sampler == "constrained" else None,
            chunk=min(CHUNK, max(self.config.pool_min, self.config.pool_factor)),
        )
        self.last_selection: RoundResult | None = None
        self._asked: set[int] = set()  # content hashes of the strategies asked so far

    def ask(self, n: int) -> list[Strategy]:
        c = self.config
        result = run_round(
            self.model,
            self.cluster,
            self.simulator,
            samples=max(c.pool_min, c.pool_factor * n, n),
            k=n,
            seed=self.seed,
            defaults=self.defaults,
            exclude_ids=self._asked,
            sampler=self.sampler,
        )
        self.last_selection = result
        self._asked.update(result.identities)
        return list(result.strategies)
