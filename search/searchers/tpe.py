"""Optuna's TPE over per-variable categorical choices (a black-box baseline, no constraints)."""

from __future__ import annotations

import optuna

from search.searchers.optuna_base import OptunaSearcher
from search.searchers.parametrisation import CategoricalParametrisation
from simulator.spec import ClusterSpec, ModelSpec, Strategy


class TPESearcher(OptunaSearcher):
    """TPE (Optuna's default sampler) on ``CategoricalParametrisation`` (search.searchers.parametrisation)."""

    name = "tpe"

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, seed: int = 0, head: int = 24) -> None:
        super().__init__(model, cluster, seed)
        self.parametrisation = CategoricalParametrisation(self.space, head)

    def _make_sampler(self) -> optuna.samplers.BaseSampler:
        return optuna.samplers.TPESampler(seed=self.seed)

    def _next(self) -> tuple[optuna.trial.Trial, Strategy]:
        trial = self.study.ask()
        return trial, self.parametrisation.decode(trial)
