"""Shared ask/tell plumbing for searchers that drive an Optuna study."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence

import optuna

from search.feasibility import MemoryModel
from search.searchers.base import Searcher
from search.space import Space, SpaceConfig
from simulator.spec import ClusterSpec, ModelSpec, Strategy


class OptunaSearcher(Searcher):
    """One Optuna trial per asked strategy; ``tell`` finishes the trial of each told strategy.

    A decoded strategy that does not fit in memory is told to the study as FAIL at once and a new
    trial is asked (up to ``max_infeasible`` per strategy), so the caller only sees feasible ones.
    """

    max_infeasible: int = 50

    def __init__(
        self, model: ModelSpec, cluster: ClusterSpec, seed: int = 0, space: SpaceConfig | None = None
    ) -> None:
        super().__init__(model, cluster, seed)
        self.space = Space(model, cluster, space)
        self.memory = MemoryModel(model, cluster)
        self.study = optuna.create_study(direction="minimize", sampler=self._make_sampler())
        self._pending: dict[str, list[optuna.trial.Trial]] = {}

    @abstractmethod
    def _make_sampler(self) -> optuna.samplers.BaseSampler:
        """The Optuna sampler (seeded with ``self.seed``)."""

    @abstractmethod
    def _next(self) -> tuple[optuna.trial.Trial, Strategy]:
        """Ask the study for one trial and decode it."""

    def ask(self, n: int) -> list[Strategy]:
        out: list[Strategy] = []
        misses = 0
        while len(out) < n:
            trial, strategy = self._next()
            verdict = self.memory.check(strategy)
            if not verdict.ok:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                misses += 1
                if misses > self.max_infeasible * n:
                    raise RuntimeError("no feasible strategy decoded; last: " + "; ".join(verdict.reasons))
                continue
            self._pending.setdefault(strategy.model_dump_json(), []).append(trial)
            out.append(strategy)
        return out

    def _observe(self, strategies: Sequence[Strategy], times: Sequence[float]) -> None:
        for s, t in zip(strategies, times, strict=True):
            trials = self._pending.get(s.model_dump_json())
            if not trials:
                raise KeyError(f"strategies: {s.name or 'a strategy'} was not asked by this searcher")
            trial = trials.pop(0)
            if math.isfinite(t):
                self.study.tell(trial, t)
            else:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
