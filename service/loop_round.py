"""One round's decision: sample M strategies under the constraints, score them, pick K diverse ones.

AutoSync supplementary §7: the M sampled strategies are first filtered by the simulator's score
(the best ``qualified_fraction`` of them are "qualified"), then K are chosen by Eq. 11's greedy
diverse selection (``search.selection.select_diverse``). Strategies a search already tried are
never proposed again. For the 'cost' objective the order is the same as for time: one search runs
on one cluster, whose price per second is fixed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from search import make_sampler
from search.selection import select_diverse
from search.similarity import FactorSimilarity, HiddenSimilarity, Similarity
from search.space import Compression, SpaceConfig, compressor_kinds, space_of
from service.domain import CandidateDraft, Search, Trial
from simulator.base import Simulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.io import parse_as


@dataclass(frozen=True)
class RoundConfig:
    """How one round samples, filters and selects."""

    # Sampler of the round: 'constrained' (Alg. 1 + 2, AutoSync) or 'random' (the ablation).
    sampler: Literal["constrained", "random"] = "constrained"
    # Fraction of the M samples, best predicted first, that qualify for selection (at least K).
    qualified_fraction: float = 0.25
    # Eq. 11's trade-off between low predicted time and low similarity among the picks.
    alpha: float = 0.5
    # Similarity of Eq. 11: 'factor' (shared per-variable choices) or 'hidden' (simulator cosine).
    similarity: Literal["factor", "hidden"] = "factor"


def strategy_key(strategy: Strategy | dict[str, Any]) -> str:
    """A strategy's identity for "already tried": its content, not its label or names."""
    s = strategy if isinstance(strategy, Strategy) else parse_as(Strategy, strategy)
    body = s.model_dump(mode="json", exclude={"name", "model", "cluster"})
    return json.dumps(body, sort_keys=True)


def plan_round(
    model: ModelSpec,
    cluster: ClusterSpec,
    simulator: Simulator,
    *,
    samples: int,
    k: int,
    seed: int,
    exclude: Iterable[str] = (),
    config: RoundConfig = RoundConfig(),
    compression: Compression = "none",
) -> list[CandidateDraft]:
    """The K candidates of a round, rank 1 = fastest predicted, with their mean similarity to the others.

    ``compression`` is the search's opt-in: 'none' samples the lossless space only. Decision for a
    lossy opt-in: each round is split, half of the samples (and K // 2 picks) from the lossless space
    and the rest from the opted-in space, selected separately. Almost every strategy drawn from a
    space with compressors compresses some shard, so without the split a lossy search would never
    measure a lossless candidate, and its lossless winner (the one comparable with the lossless
    baselines, with no accuracy question) would be missing from its report.
    """
    if k < 1 or samples < k:
        raise ValueError(f"samples/k: need samples >= k >= 1, got samples={samples}, k={k}")
    seen = set(exclude)
    similarity = _similarity(config, simulator, model, cluster)
    if compression == "none" or k < 2:
        parts = [(compression, samples, k)]
    else:
        parts = [("none", samples // 2, k // 2), (compression, samples - samples // 2, k - k // 2)]
    chosen: list[Strategy] = []
    predicted: list[float] = []
    for i, (comp, n, kk) in enumerate(parts):
        picks, times = _pick(
            model, cluster, simulator, similarity, n, kk, seed + 7919 * i, seen, config, comp
        )
        chosen += picks
        predicted += times
    if not chosen:
        raise RuntimeError(f"all {samples} sampled strategies were already tried in this search")
    return drafts(chosen, predicted, similarity.matrix(chosen).tolist())


def _pick(
    model: ModelSpec,
    cluster: ClusterSpec,
    simulator: Simulator,
    similarity: Similarity,
    samples: int,
    k: int,
    seed: int,
    seen: set[str],
    config: RoundConfig,
    compression: Compression,
) -> tuple[list[Strategy], list[float]]:
    """Sample ``samples`` new strategies of one space, keep the best predicted, choose ``k`` by Eq. 11."""
    pool: list[Strategy] = []
    space = SpaceConfig(compressors=compressor_kinds(compression))
    for s in make_sampler(config.sampler, model, cluster, seed, space=space).sample(samples):
        if compression != "none" and space_of(s) == "lossless":
            continue  # the lossless half of the round has its own samples
        key = strategy_key(s)
        if key not in seen:
            seen.add(key)
            pool.append(s)
    if not pool:
        return [], []
    k = min(k, len(pool))
    predicted = np.asarray(simulator.predict(model, cluster, pool), dtype=np.float64)
    n_qualified = max(k, math.ceil(config.qualified_fraction * len(pool)))
    qualified = np.argsort(predicted, kind="stable")[:n_qualified]
    chosen = select_diverse([pool[i] for i in qualified], predicted[qualified], k, config.alpha, similarity)
    return list(chosen.strategies), list(chosen.predicted)


def drafts(
    strategies: Sequence[Strategy], predicted: Sequence[float], similarity: Sequence[Sequence[float]]
) -> list[CandidateDraft]:
    """Candidate drafts ranked by predicted time; similarity = mean sim to the other picks."""
    k = len(strategies)
    sim = np.asarray(similarity, dtype=np.float64).reshape(k, k)
    mean_sim = (sim.sum(axis=1) - np.diag(sim)) / max(k - 1, 1)
    order = sorted(range(k), key=lambda i: (predicted[i], i))
    return [
        CandidateDraft(
            rank=rank,
            strategy=strategies[i].model_dump(mode="json"),
            predicted_time=float(predicted[i]),
            similarity=float(mean_sim[i]),
        )
        for rank, i in enumerate(order, start=1)
    ]


def _similarity(
    config: RoundConfig, simulator: Simulator, model: ModelSpec, cluster: ClusterSpec
) -> Similarity:
    if config.similarity == "hidden":
        return HiddenSimilarity(simulator, model, cluster)
    return FactorSimilarity(model)


def baseline_strategies(model: ModelSpec, cluster: ClusterSpec, names: Sequence[str]) -> dict[str, Strategy]:
    """Baseline strategies by name: members of the measured families (``search.baselines``), or a
    name of ``simulator.analytical.baselines`` (the older analytically tuned single baselines)."""
    from search.baselines import baseline_strategy
    from simulator.analytical import baseline

    out = {}
    for name in names:
        try:
            out[name] = baseline_strategy(name, model, cluster)
        except ValueError:
            out[name] = baseline(name, model, cluster)
    return out


def due_baselines(search: Search, trials: Sequence[Trial]) -> tuple[str, ...]:
    """The baseline members a search must have queued by now (issue 14: interleaved, not first).

    Every member of the search's families (``search.baselines.baseline_names(compression)``) is
    assigned a round by ``baseline_schedule`` over the rounds the budget allows; a member is due
    once its round is the next to plan, and all are due once the candidate budget is spent.
    """
    from search.baselines import baseline_names, baseline_schedule

    names = baseline_names(search.compression)
    if sum(1 for t in trials if t.candidate_id is not None) >= search.trial_budget:
        return names
    plan = baseline_schedule(names, math.ceil(search.trial_budget / search.candidates_per_round))
    return tuple(n for n in names if plan[n] <= search.current_round + 1)
