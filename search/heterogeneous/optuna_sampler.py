"""Black-box baselines through Optuna: Bayesian optimisation (GP, TPE) and a genetic algorithm (NSGA-II).

One categorical parameter per layer (``layer_<l>`` in the type indices); the objective is the
money of the provisioned schedule. A schedule that cannot meet the limit scores PENALTY times the
cheapest money seen so far (or 1e6 before any), a finite value so that the GP's model stays
usable. HeterPS's BO baseline (Dolatnia et al. 2016) is a GP-based BO; its Genetic baseline
(Barika et al. 2019) is a plain GA, for which NSGA-II with one objective is the GA Optuna keeps.
"""

from __future__ import annotations

import math
import time
from typing import Literal

import optuna

from search.heterogeneous.base import Assignment, Objective, Scheduler

PENALTY = 3.0
SamplerKind = Literal["gp", "tpe", "nsga2"]


class OptunaScheduler(Scheduler):
    """Optuna's GP or TPE sampler (BO) or NSGA-II (genetic) over the per-layer types."""

    def __init__(
        self, kind: SamplerKind, trials: int, seed: int = 0, time_limit: float | None = None
    ) -> None:
        self.kind = kind
        self.trials = trials
        self.seed = seed
        self.time_limit = time_limit
        self.name = {"gp": "bo-gp", "tpe": "bo-tpe", "nsga2": "genetic"}[kind]

    def _sampler(self) -> optuna.samplers.BaseSampler:
        if self.kind == "gp":
            return optuna.samplers.GPSampler(seed=self.seed)
        if self.kind == "tpe":
            return optuna.samplers.TPESampler(seed=self.seed)
        return optuna.samplers.NSGAIISampler(seed=self.seed, population_size=50)

    def _search(self, objective: Objective) -> tuple[Assignment | None, dict[str, object]]:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="minimize", sampler=self._sampler())
        choices = list(range(objective.num_types))
        best: Assignment | None = None
        best_money = math.inf
        start = time.perf_counter()
        for _ in range(self.trials):
            trial = study.ask()
            a = tuple(
                int(trial.suggest_categorical(f"layer_{i}", choices)) for i in range(objective.num_layers)
            )
            money = objective.money(a)
            if money < best_money:
                best, best_money = a, money
            ref = best_money if math.isfinite(best_money) else 1e6
            study.tell(trial, money if math.isfinite(money) else PENALTY * ref)
            if self.time_limit is not None and time.perf_counter() - start > self.time_limit:
                break
        return best, {"notes": (f"{len(study.trials)} trials",)}
