"""Optuna's CMA-ES over a nine-number continuous relaxation of the space."""

from __future__ import annotations

import optuna

from search.searchers.optuna_base import OptunaSearcher
from search.searchers.parametrisation import CompactParametrisation
from simulator.spec import ClusterSpec, ModelSpec, Strategy


class CMAESSearcher(OptunaSearcher):
    """CMA-ES (needs the ``cmaes`` package) on ``CompactParametrisation``; placement and groups
    come from Algorithms 1 and 2 in their deterministic form."""

    name = "cmaes"

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, seed: int = 0) -> None:
        super().__init__(model, cluster, seed)
        self.parametrisation = CompactParametrisation(self.space, seed)

    def _make_sampler(self) -> optuna.samplers.BaseSampler:
        return optuna.samplers.CmaEsSampler(
            seed=self.seed, n_startup_trials=1, warn_independent_sampling=False
        )

    def _next(self) -> tuple[optuna.trial.Trial, Strategy]:
        trial = self.study.ask(fixed_distributions=self.parametrisation.distributions)
        return trial, self.parametrisation.decode(trial.params)
