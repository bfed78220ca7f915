"""The ask/tell contract, run over every searcher: valid feasible asks, seeds, tell bookkeeping."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import optuna
import pytest

from search import DEFAULTS, ArraySampler, MemoryModel
from search.searchers import (
    AutoSyncConfig,
    AutoSyncSearcher,
    CMAESSearcher,
    ConstrainedSearcher,
    RandomSearcher,
    Searcher,
    TPESearcher,
)
from simulator.analytical import AnalyticalSimulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy

optuna.logging.set_verbosity(optuna.logging.WARNING)
SIM = AnalyticalSimulator()
SMALL = AutoSyncConfig(pool_factor=4, pool_min=20)

SEARCHERS: dict[str, Callable[[ModelSpec, ClusterSpec, int], Searcher]] = {
    "random": lambda m, c, seed: RandomSearcher(m, c, seed),
    "autosync-s": lambda m, c, seed: ConstrainedSearcher(m, c, seed),
    "autosync": lambda m, c, seed: AutoSyncSearcher(m, c, SIM, seed, SMALL),
    "tpe": lambda m, c, seed: TPESearcher(m, c, seed, head=4),
    "cmaes": lambda m, c, seed: CMAESSearcher(m, c, seed),
}


def _run(searcher: Searcher, model: ModelSpec, cluster: ClusterSpec, rounds: int = 3) -> list[Strategy]:
    asked = []
    for _ in range(rounds):
        batch = searcher.ask(4)
        asked += batch
        searcher.tell(batch, SIM.predict(model, cluster, batch).tolist())
    return asked


@pytest.mark.parametrize("kind", sorted(SEARCHERS))
def test_asks_are_valid_feasible_and_told(kind: str, model: ModelSpec, cluster: ClusterSpec) -> None:
    searcher = SEARCHERS[kind](model, cluster, 0)
    asked = _run(searcher, model, cluster)
    memory = MemoryModel(model, cluster)
    assert len(asked) == 12
    for s in asked:
        s.check(model, cluster)
        assert memory.check(s).ok
    assert len(searcher.history) == 12
    best = searcher.best()
    assert best is not None and best.time == min(o.time for o in searcher.history)


@pytest.mark.parametrize("kind", sorted(SEARCHERS))
def test_same_seed_same_asks(kind: str, model: ModelSpec, cluster: ClusterSpec) -> None:
    a = _run(SEARCHERS[kind](model, cluster, 3), model, cluster)
    b = _run(SEARCHERS[kind](model, cluster, 3), model, cluster)
    assert a == b
    c = _run(SEARCHERS[kind](model, cluster, 4), model, cluster)
    assert a != c


@pytest.mark.parametrize("kind", ["tpe", "cmaes"])
def test_optuna_searchers_track_trials(kind: str, model: ModelSpec, cluster: ClusterSpec) -> None:
    searcher = SEARCHERS[kind](model, cluster, 0)
    first, second = searcher.ask(2)
    # told out of order, one failed (e.g. out of memory at run time): both trials are finished
    searcher.tell([second, first], [None, 0.5])
    states = [t.state for t in searcher.study.trials]  # type: ignore[attr-defined]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 1
    assert states.count(optuna.trial.TrialState.FAIL) >= 1
    assert searcher.history[0].time == math.inf and searcher.best() is not None
    with pytest.raises(KeyError, match="was not asked"):
        searcher.tell([first], [0.4])


def test_tell_rejects_bad_times(model: ModelSpec, cluster: ClusterSpec) -> None:
    searcher = RandomSearcher(model, cluster, 0)
    batch = searcher.ask(2)
    with pytest.raises(ValueError, match="times: 1 values for 2"):
        searcher.tell(batch, [0.1])
    with pytest.raises(ValueError, match="must be > 0"):
        searcher.tell(batch, [0.1, -1.0])


def test_autosync_asks_diverse_qualified_strategies(model: ModelSpec, cluster: ClusterSpec) -> None:
    searcher = AutoSyncSearcher(model, cluster, SIM, 0, SMALL)
    batch = searcher.ask(5)
    sel = searcher.last_selection
    assert sel is not None and list(sel.strategies) == batch
    assert np.allclose(sel.predicted, SIM.predict(model, cluster, batch))
    # one round of the shared implementation: M = 20 draws, the round's qualified fraction
    assert sel.samples == 20 and sel.qualified == max(5, math.ceil(DEFAULTS.qualified_fraction * sel.pool))
    fresh = ArraySampler(searcher.sampler.space, 0, searcher.sampler.memory, chunk=searcher.sampler.chunk)
    pool = fresh.sample(20)
    cutoff = np.sort(SIM.predict(model, cluster, pool))[sel.qualified - 1]
    assert max(sel.predicted) <= cutoff + 1e-12
    later = searcher.ask(5)
    assert not {s.model_dump_json() for s in later} & {s.model_dump_json() for s in batch}
