"""The service's round: orchestration around ``search.round.run_round`` (the one round).

``run_round`` samples M strategies under the constraints, scores them, keeps the qualified
fraction and picks K by Eq. 11, with ``search.round.DEFAULTS`` (the reasons for each value are
there). This module only adds what is the service's: already-tried strategies are excluded, a
lossy search's round is split into a lossless and a lossy half, and the picks become
persistence-facing ``CandidateDraft``s. For the 'cost' objective the order is the same as for
time: one search runs on one cluster, whose price per second is fixed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from search.round import AllTriedError, RoundDefaults, RoundResult, RoundScorer, run_round
from search.similarity import FactorSimilarity, HiddenSimilarity, Similarity
from search.space import Compression, SpaceConfig, compressor_kinds
from service.domain import CandidateDraft, Search, Trial
from simulator.base import Simulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.io import parse_as

#: The service's round settings are the round's own (``search.round.RoundDefaults``).
RoundConfig = RoundDefaults


def plan_round(
    model: ModelSpec,
    cluster: ClusterSpec,
    simulator: Simulator | RoundScorer,
    *,
    samples: int,
    k: int,
    seed: int,
    exclude: Iterable[Strategy | dict[str, Any]] = (),
    config: RoundDefaults = RoundDefaults(),
    compression: Compression = "none",
) -> list[CandidateDraft]:
    """The K candidates of a round, rank 1 = fastest predicted, with their mean similarity to the
    others, and which scorer ranked each and its uncertainty. ``simulator``: a Simulator or any
    ``search.round.RoundScorer`` (the learned / hybrid scorers).

    ``exclude``: the search's already-tried strategies (objects or stored dicts); they are never
    proposed again. ``compression`` is the search's opt-in: 'none' samples the lossless space
    only. Decision for a lossy opt-in: each round is split, half of the samples (and K // 2 picks)
    from the lossless space and the rest from the opted-in space (lossy samples only), selected
    separately. Almost every strategy drawn from a space with compressors compresses some shard,
    so without the split a lossy search would never measure a lossless candidate, and its
    lossless winner (the one comparable with the lossless baselines, with no accuracy question)
    would be missing from its report.
    """
    if k < 1 or samples < k:
        raise ValueError(f"samples/k: need samples >= k >= 1, got samples={samples}, k={k}")
    tried = [s if isinstance(s, Strategy) else parse_as(Strategy, s) for s in exclude]
    if compression == "none" or k < 2:
        parts = [(compression, samples, k)]
    else:
        parts = [("none", samples // 2, k // 2), (compression, samples - samples // 2, k - k // 2)]
    chosen: list[Strategy] = []
    predicted: list[float] = []
    scorers: list[str] = []
    uncertainty: list[float | None] = []
    for i, (comp, n, kk) in enumerate(parts):
        result = _part(model, cluster, simulator, n, kk, seed + 7919 * i, tried, config, comp)
        if result is not None:
            chosen += result.strategies
            predicted += result.predicted
            scorers += result.scorers
            uncertainty += result.uncertainty
    if not chosen:
        raise AllTriedError(f"all {samples} sampled strategies were already tried in this search")
    similarity = _similarity(config, simulator, model, cluster)
    return drafts(chosen, predicted, similarity.matrix(chosen).tolist(), scorers, uncertainty)


def _part(
    model: ModelSpec,
    cluster: ClusterSpec,
    simulator: Simulator | RoundScorer,
    samples: int,
    k: int,
    seed: int,
    tried: list[Strategy],
    config: RoundDefaults,
    compression: Compression,
) -> RoundResult | None:
    """One space's share of the round (None when every sample was already tried)."""
    try:
        return run_round(
            model,
            cluster,
            simulator,
            samples=samples,
            k=min(k, samples),
            seed=seed,
            defaults=config,
            space=SpaceConfig(compressors=compressor_kinds(compression)),
            exclude=tried,
            lossy_only=compression != "none",
        )
    except AllTriedError:
        return None


def drafts(
    strategies: Sequence[Strategy],
    predicted: Sequence[float],
    similarity: Sequence[Sequence[float]],
    scorers: Sequence[str] | None = None,
    uncertainty: Sequence[float | None] | None = None,
) -> list[CandidateDraft]:
    """Candidate drafts ranked by predicted time; similarity = mean sim to the other picks; with
    ``scorers`` / ``uncertainty`` (``RoundResult.scorers`` / ``.uncertainty``) when the draft has
    those fields (``service.domain.CandidateDraft``)."""
    k = len(strategies)
    sim = np.asarray(similarity, dtype=np.float64).reshape(k, k)
    mean_sim = (sim.sum(axis=1) - np.diag(sim)) / max(k - 1, 1)
    order = sorted(range(k), key=lambda i: (predicted[i], i))
    fields = {f.name for f in dataclasses.fields(CandidateDraft)}
    out = []
    for rank, i in enumerate(order, start=1):
        extra: dict[str, Any] = {}
        if scorers is not None and "scorer" in fields:
            extra["scorer"] = scorers[i]
        if uncertainty is not None and "uncertainty" in fields:
            extra["uncertainty"] = uncertainty[i]
        out.append(
            CandidateDraft(
                rank=rank,
                strategy=strategies[i].model_dump(mode="json"),
                predicted_time=float(predicted[i]),
                similarity=float(mean_sim[i]),
                **extra,
            )
        )
    return out


def _similarity(
    config: RoundDefaults, simulator: Simulator | RoundScorer, model: ModelSpec, cluster: ClusterSpec
) -> Similarity:
    """The round's similarity, for the similarity shown with the K candidates of both halves."""
    if config.similarity == "hidden":
        inner = simulator if isinstance(simulator, Simulator) else getattr(simulator, "simulator", None)
        if not isinstance(inner, Simulator):
            raise ValueError("similarity: 'hidden' needs a simulator behind the round's scorer")
        return HiddenSimilarity(inner, model, cluster)
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
