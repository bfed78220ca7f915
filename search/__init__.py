"""Deciding: the strategy space, samplers under AutoSync's constraints, memory feasibility,
similarity, diverse selection (Eq. 11) and the searchers that drive them.

Public API:
    Space(model, cluster, SpaceConfig)      the strategy space (search.space) and log10_size()
    make_sampler(kind, model, cluster, seed) -> Sampler     kind: "random" | "constrained"
    Sampler.sample(n) -> list[Strategy]     seeded; UniformSampler, ConstrainedSampler(Constraints)
    load_balance / adjacent_merge           Algorithms 1 and 2 (search.constraints)
    MemoryModel(model, cluster).check(s) -> Feasibility   device and PS-host memory, with reasons
    FactorSimilarity / HiddenSimilarity     sim(S_i, S_j) behind Similarity
    select_diverse(strategies, scores, k, alpha, similarity) -> Selection   Eq. 11
    run_round(model, cluster, scorer, samples=M, k=K, seed=S) -> RoundResult   the one round
        (search.round: sample under the constraints -> score -> qualify -> Eq. 11), DEFAULTS,
        RoundScorer / SampleBatch / RoundScores (the scorer interface), ArraySampler
    Searcher.ask(n) / tell(strategies, times): RandomSearcher, ConstrainedSearcher (AutoSync(-s)),
        AutoSyncSearcher, TPESearcher, CMAESSearcher (search.searchers)
"""

from __future__ import annotations

from typing import Literal

from search.constraints import adjacent_merge, load_balance
from search.feasibility import Feasibility, MemoryConfig, MemoryModel
from search.round import (
    DEFAULTS,
    AllTriedError,
    RoundDefaults,
    RoundResult,
    RoundScorer,
    RoundScores,
    SampleBatch,
    qualify_and_select,
    run_round,
)
from search.samplers import (
    ConstrainedSampler,
    Constraints,
    InfeasibleSpaceError,
    Sampler,
    UniformSampler,
)
from search.samplers.arrays import ArraySampler, ChoiceArrays
from search.samplers.partial import Prior
from search.searchers import (
    AutoSyncConfig,
    AutoSyncSearcher,
    CMAESSearcher,
    ConstrainedSearcher,
    RandomSearcher,
    Searcher,
    TPESearcher,
)
from search.selection import Selection, select_diverse, select_exact
from search.similarity import FactorSimilarity, HiddenSimilarity, Similarity
from search.space import Space, SpaceConfig
from simulator.spec import ClusterSpec, ModelSpec

SamplerKind = Literal["random", "constrained"]


def make_sampler(
    kind: SamplerKind,
    model: ModelSpec,
    cluster: ClusterSpec,
    seed: int = 0,
    *,
    space: SpaceConfig | None = None,
    memory: MemoryConfig | Literal[False] | None = None,
    constraints: Constraints | None = None,
    prior: Prior = "hierarchical",
) -> Sampler:
    """A sampler of ``kind`` over the space of ``model`` on ``cluster``.

    ``memory=None`` rejects strategies that do not fit with the default MemoryConfig; pass a
    MemoryConfig to change its assumptions, or False to keep every draw. ``prior`` is how the
    partial strategy's factors are drawn (``search.samplers.partial``).
    """
    sp = Space(model, cluster, space)
    mm = None if memory is False else MemoryModel(model, cluster, memory or None)
    if kind == "random":
        if constraints is not None:
            raise ValueError("constraints: the random sampler has none")
        return UniformSampler(sp, seed, mm, prior=prior)
    if kind == "constrained":
        return ConstrainedSampler(sp, seed, mm, constraints, prior=prior)
    raise ValueError(f"kind: unknown sampler {kind!r}; expected 'random' or 'constrained'")


__all__ = [
    "DEFAULTS",
    "AllTriedError",
    "ArraySampler",
    "AutoSyncConfig",
    "AutoSyncSearcher",
    "CMAESSearcher",
    "ChoiceArrays",
    "ConstrainedSampler",
    "ConstrainedSearcher",
    "Constraints",
    "FactorSimilarity",
    "Feasibility",
    "HiddenSimilarity",
    "InfeasibleSpaceError",
    "MemoryConfig",
    "MemoryModel",
    "Prior",
    "RandomSearcher",
    "RoundDefaults",
    "RoundResult",
    "RoundScorer",
    "RoundScores",
    "SampleBatch",
    "Sampler",
    "SamplerKind",
    "Searcher",
    "Selection",
    "Similarity",
    "Space",
    "SpaceConfig",
    "TPESearcher",
    "UniformSampler",
    "adjacent_merge",
    "load_balance",
    "make_sampler",
    "qualify_and_select",
    "run_round",
    "select_diverse",
    "select_exact",
]
