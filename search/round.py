"""One AutoSync round: sample M under the constraints → score → keep the qualified fraction → Eq. 11.

This module is the only implementation of a round (issue 16). The service's loop
(``service.loop.rounds``), the AutoSync searcher (``search.searchers.autosync``), the CLI's
``strategist select`` and the benchmarks all call :func:`run_round` with :data:`DEFAULTS`.

The scorer interface
--------------------
A round scores its M samples through a :class:`RoundScorer`: anything with a ``name`` and a
``score(batch: SampleBatch) -> RoundScores``. The analytical model is :class:`AnalyticalScorer`
(array path, no Strategy objects); :class:`SimulatorScorer` adapts any ``simulator.base.Simulator``
(it materialises the M Strategy objects, the slow reference path). A learned or hybrid scorer
implements the same protocol:

- read the samples as arrays from ``batch.arrays`` (a ``simulator.analytical.StrategyBatch``: one
  row per shard, CSR by strategy; ``simulator.analytical.features(batch.ma, batch.ca,
  batch.arrays)`` gives the per-shard z_i and the global z without any Strategy object), or ask
  for Strategy objects of some samples only with ``batch.strategies(idx)`` (decoded on demand,
  cached); ``batch.take(idx)`` is the sub-batch of those samples (e.g. to rescore the uncertain
  ones with another scorer);
- return :class:`RoundScores`: ``seconds`` (M,) predicted seconds per iteration, lower is better
  (a ranker that is not calibrated in seconds must still return "lower = faster" values and set
  ``calibrated=False``: Eq. 11 normalises the scores, so only their order and relative spacing
  matter to the selection); optionally ``uncertainty`` (M,) >= 0 in the scorer's documented
  unit, and ``labels`` (M,) naming which scorer ranked each sample (a hybrid's per-sample
  choice; the candidate shows it). ``scorer`` names the scorer as a whole.

A scorer must not reorder or drop samples, must be deterministic for a given batch, and must be
safe to call from the service's worker process (no global state changed). A round calls it on
consecutive slices of its pool of about ``SCORE_ROWS`` shard rows each (cache-sized arrays), so
a scorer's values must not depend on which other samples share its batch (no per-batch
normalisation).
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from search.feasibility import MemoryConfig, MemoryModel
from search.samplers.arrays import CHUNK, ArraySampler, ChoiceArrays
from search.samplers.base import InfeasibleSpaceError
from search.samplers.constrained import Constraints
from search.samplers.partial import Prior
from search.selection import Choice, select_diverse, select_embedded, select_rows
from search.similarity import FactorSimilarity, HiddenSimilarity, Similarity
from search.space import Space, SpaceConfig, space_of
from simulator.analytical import (
    AnalyticalSimulator,
    ClusterArrays,
    ModelArrays,
    StrategyBatch,
    cluster_arrays,
    decode,
    encode,
    model_arrays,
)
from simulator.analytical.batch import CHOICE_FIELDS, make_batch
from simulator.base import Simulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy, strategy_key


@dataclass(frozen=True)
class RoundDefaults:
    """How every round samples, filters and selects: one set of values, used everywhere.

    Each value and its reason:

    - ``sampler = "constrained"``: AutoSync §6, a partial strategy completed by c_lb (Algorithm 1)
      and c_am (Algorithm 2); 'random' (no constraints) is the ablation, kept for comparison.
    - ``qualified_fraction = 0.25``: AutoSync supplementary §7 keeps the best-predicted samples as
      "qualified" before the diverse selection. A quarter keeps the selection among strategies the
      scorer rates well (at M = 200, the top 50) while leaving Eq. 11 room to trade a little
      predicted time for diversity; at least K always qualify. The service and the AutoSync
      searcher used 0.25 (the search-quality benchmark 0.5, the CLI kept all M): 0.25 is kept.
    - ``alpha = 0.05``: Eq. 11's weight of similarity against the normalised predicted time
      (``search.selection``: f̃ spans [0, 1] over the qualified set). Measured with factor
      similarity, two constrained samples share 20-45 % of their choices on BERT-large/B7 and
      25-60 % on NCF-sparse/A2 (10th-90th percentile, median 0.34 and 0.44). A candidate's greedy
      penalty is 2 alpha sum_{j in S} sim(x, j); over K - 1 = 7 picks the spread between a
      dissimilar (0.2) and a similar (0.45) candidate is 2 x 0.05 x 7 x 0.25 = 0.18 of the
      predicted-time span: it breaks near-ties towards different strategies but does not prefer
      one predicted much slower. Chosen by measurement (2026-11-29, the learned loop of
      ``benchmarks/search_quality_measured.py --alpha A`` on the five runtimes-v2 domains, K = 5,
      merged labels): at 0.1 the diverse pick often dropped the domain's best strategy from the
      top 5, and NCF-sparse__B10 (best 17 % ahead of the next) missed it in 25 of 60 searches on
      design seeds 100-159 (+8.3 % at 20 trials), 12 of 60 at 0.05 (+3.9 %), 11 at 0 (+4.1 %);
      on seeds 30-59, measured after the choice, it went the other way, 1 of 30 at 0.1 and 4 of
      30 at 0.05. By blocks of 30 seeds (30, 60, 100, 130) the misses were 1 / 7 / 12 / 13 at 0.1
      (a spread binomial noise hardly gives: the outcome hangs on which near-tie the diverse pick
      breaks) and 4 / 5 / 5 / 7 at 0.05: 33 against 21 of 120 in all. The other four domains
      moved by at most 0.3 % of best@20 either way.
      0.05, not 0, keeps Eq. 11's exploration for a scorer that is wrong (the analytical model
      on such a domain). The service's former 0.5 made the spread 1.75 spans, so the selection
      ignored the scores.
    - ``similarity = "factor"``: AutoSync §7's first approach (shared per-variable choices). It
      needs no model, so it works before any learned simulator exists and on integer-coded arrays
      (the array path); 'hidden' (cosine of a simulator's hidden vectors) is the alternative.
    """

    sampler: Literal["constrained", "random"] = "constrained"
    qualified_fraction: float = 0.25
    alpha: float = 0.05
    similarity: Literal["factor", "hidden"] = "factor"

    def __post_init__(self) -> None:
        if self.sampler not in ("constrained", "random"):
            raise ValueError(f"sampler: unknown {self.sampler!r}; expected 'constrained' or 'random'")
        if not 0 < self.qualified_fraction <= 1:
            raise ValueError(f"qualified_fraction: must be in (0, 1], got {self.qualified_fraction}")
        if not self.alpha >= 0:
            raise ValueError(f"alpha: must be >= 0, got {self.alpha}")
        if self.similarity not in ("factor", "hidden"):
            raise ValueError(f"similarity: unknown {self.similarity!r}; expected 'factor' or 'hidden'")


#: The defaults of every round (service, searcher, CLI, benchmarks).
DEFAULTS = RoundDefaults()


class SampleBatch:
    """M sampled strategies of one model on one cluster: arrays first, Strategy objects on demand.

    ``arrays`` is the analytical model's ``StrategyBatch`` (one row per shard; strategy n's rows
    are ``arrays.offsets[n]:arrays.offsets[n+1]``); ``ma`` / ``ca`` are the model's and cluster's
    constant arrays. ``strategies(idx)`` decodes only the requested samples (cached), so a round
    builds K Strategy objects, not M. A batch made ``from_strategies`` keeps the given objects.
    """

    def __init__(
        self,
        model: ModelSpec,
        cluster: ClusterSpec,
        arrays: StrategyBatch,
        objects: Sequence[Strategy] | None = None,
    ) -> None:
        self.model = model
        self.cluster = cluster
        self.arrays = arrays
        self._objects: dict[int, Strategy] = {}
        if objects is not None:
            if len(objects) != arrays.size:
                raise ValueError(f"objects: {len(objects)} strategies for a batch of {arrays.size}")
            self._objects = dict(enumerate(objects))

    @classmethod
    def from_strategies(
        cls, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]
    ) -> SampleBatch:
        """The batch of given Strategy objects (encoded once; the objects are kept)."""
        if not strategies:
            raise ValueError("strategies: need at least one strategy")
        return cls(
            model, cluster, encode(model_arrays(model), cluster_arrays(cluster), strategies), strategies
        )

    @property
    def ma(self) -> ModelArrays:
        return model_arrays(self.model)

    @property
    def ca(self) -> ClusterArrays:
        return cluster_arrays(self.cluster)

    def __len__(self) -> int:
        return self.arrays.size

    def strategies(self, idx: Sequence[int] | np.ndarray | None = None) -> list[Strategy]:
        """Strategy objects of samples ``idx`` (all when None), in the order given; decoded once."""
        order = range(len(self)) if idx is None else [int(i) for i in np.asarray(idx).reshape(-1)]
        out = []
        for i in order:
            if not 0 <= i < len(self):
                raise IndexError(f"idx: sample {i} is outside the batch of {len(self)}")
            s = self._objects.get(i)
            if s is None:
                s = self._objects[i] = decode(self.ma, self.ca, self.arrays, i)
            out.append(s)
        return out

    def take(self, idx: Sequence[int] | np.ndarray) -> SampleBatch:
        """The sub-batch of samples ``idx`` (in that order), arrays re-indexed; known objects kept."""
        index = np.asarray(idx, dtype=np.int64).reshape(-1)
        if index.size == 0:
            raise ValueError("idx: need at least one sample")
        sub = take_rows(self.ma, self.ca, self.arrays, index)
        out = SampleBatch(self.model, self.cluster, sub)
        out._objects = {j: self._objects[int(i)] for j, i in enumerate(index) if int(i) in self._objects}
        return out


def take_rows(ma: ModelArrays, ca: ClusterArrays, batch: StrategyBatch, index: np.ndarray) -> StrategyBatch:
    """The StrategyBatch of strategies ``index`` of ``batch``, in that order (renumbered 0..)."""
    lo, hi = batch.offsets[index], batch.offsets[index + 1]
    counts = hi - lo
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    rows = np.arange(int(counts.sum()), dtype=np.int64) + starts
    cols = {k: getattr(batch, k)[rows] for k in CHOICE_FIELDS[1:]}
    return make_batch(ma, ca, strategy=np.repeat(np.arange(len(index)), counts), **cols)


@dataclass(frozen=True, eq=False)
class RoundScores:
    """What a RoundScorer says about the M samples of a batch, index-aligned with it.

    seconds      (M,) float64, finite: predicted seconds per iteration; lower is better.
    scorer       the scorer as a whole ('analytical', 'learned:gat@v3', 'hybrid', ...).
    uncertainty  (M,) float64 >= 0, or None when the scorer gives none (the analytical model).
                 Its unit is the scorer's to document (e.g. ensemble std of log-seconds).
    labels       (M,) str, which scorer ranked each sample (a hybrid's per-sample choice), or
                 None when ``scorer`` ranked all of them.
    calibrated   False when ``seconds`` orders strategies but is not in seconds (a ranker).
    """

    seconds: np.ndarray
    scorer: str
    uncertainty: np.ndarray | None = None
    labels: np.ndarray | None = None
    calibrated: bool = True

    def __post_init__(self) -> None:
        s = np.asarray(self.seconds, dtype=np.float64)
        if s.ndim != 1:
            raise ValueError(f"seconds: shape {s.shape}, expected (M,)")
        if not np.all(np.isfinite(s)):
            raise ValueError(f"seconds: {self.scorer} returned non-finite values")
        object.__setattr__(self, "seconds", s)
        if self.uncertainty is not None:
            u = np.asarray(self.uncertainty, dtype=np.float64)
            if u.shape != s.shape or not np.all(u >= 0):
                raise ValueError(f"uncertainty: need shape {s.shape} and values >= 0")
            object.__setattr__(self, "uncertainty", u)
        if self.labels is not None:
            lab = np.asarray(self.labels, dtype=object)
            if lab.shape != s.shape:
                raise ValueError(f"labels: shape {lab.shape}, expected {s.shape}")
            object.__setattr__(self, "labels", lab)

    def label(self, i: int) -> str:
        """The scorer that ranked sample ``i``."""
        return self.scorer if self.labels is None else str(self.labels[i])


@runtime_checkable
class RoundScorer(Protocol):
    """Scores a round's samples (see the module docstring for the full contract)."""

    @property
    def name(self) -> str:
        """Short name of the scorer, shown with every candidate it ranked."""
        ...

    def score(self, batch: SampleBatch) -> RoundScores:
        """Scores of every sample of ``batch``, in batch order."""
        ...


@dataclass
class AnalyticalScorer:
    """The analytical model (Eq. 1-3) on the batch's arrays: no Strategy object is built."""

    simulator: AnalyticalSimulator = field(default_factory=AnalyticalSimulator)
    name: str = "analytical"

    def score(self, batch: SampleBatch) -> RoundScores:
        t = self.simulator.score_batch(batch.model, batch.cluster, batch.arrays).t_iter
        return RoundScores(seconds=t, scorer=self.name)


@dataclass
class SimulatorScorer:
    """Any ``Simulator`` through ``predict`` on Strategy objects (materialises all M: the reference)."""

    simulator: Simulator

    @property
    def name(self) -> str:
        return self.simulator.name

    def score(self, batch: SampleBatch) -> RoundScores:
        t = self.simulator.predict(batch.model, batch.cluster, batch.strategies())
        return RoundScores(seconds=t, scorer=self.name, calibrated=not self.simulator.is_ranker)


def scorer_for(simulator: Simulator | RoundScorer) -> RoundScorer:
    """The round scorer of a simulator: arrays for the analytical model, objects otherwise."""
    if isinstance(simulator, AnalyticalSimulator):
        return AnalyticalScorer(simulator, simulator.name)
    if isinstance(simulator, Simulator):
        return SimulatorScorer(simulator)
    return simulator


# ---------------------------------------------------------------------------------- the round


class AllTriedError(RuntimeError):
    """Every sample of a round was already tried (or dropped): nothing is left to choose from."""


@dataclass(frozen=True)
class RoundResult:
    """The K chosen strategies of a round (pick order) and what the round knew about them."""

    strategies: tuple[Strategy, ...]
    identities: tuple[int, ...]  # content hash of each (``ChoiceArrays.identity``)
    indices: tuple[int, ...]  # positions among the round's pool (the M samples less exclusions)
    predicted: tuple[float, ...]  # the scorer's seconds of each chosen strategy
    uncertainty: tuple[float | None, ...]
    scorers: tuple[str, ...]  # which scorer ranked each chosen strategy
    similarity: tuple[tuple[float, ...], ...]  # K x K, the round's similarity
    scorer: str
    samples: int  # M drawn (feasible)
    pool: int  # after already-tried and duplicate samples were dropped
    qualified: int
    alpha: float
    objective: float  # Eq. 11 with the normalised scores
    path: Literal["arrays", "objects"]
    timings: dict[str, float] = field(default_factory=dict, compare=False)  # CPU s per stage

    @property
    def mean_pairwise_similarity(self) -> float:
        k = len(self.indices)
        if k < 2:
            return 0.0
        s = np.array(self.similarity)
        return float((s.sum() - np.trace(s)) / (k * (k - 1)))


def run_round(
    model: ModelSpec,
    cluster: ClusterSpec,
    scorer: RoundScorer | Simulator,
    *,
    samples: int,
    k: int,
    seed: int,
    defaults: RoundDefaults = DEFAULTS,
    space: SpaceConfig | None = None,
    memory: MemoryConfig | Literal[False] | None = None,
    constraints: Constraints | None = None,
    prior: Prior = "hierarchical",
    exclude: Iterable[Strategy] = (),
    exclude_ids: Iterable[int] = (),
    lossy_only: bool = False,
    path: Literal["arrays", "objects"] = "arrays",
    sampler: ArraySampler | None = None,
) -> RoundResult:
    """One round: sample ``samples`` (M) feasible strategies, drop already-tried and duplicate
    ones, score them, keep the best ``defaults.qualified_fraction`` (at least ``k``) and choose
    ``k`` by Eq. 11 (``search.selection``) with ``defaults.alpha`` and ``defaults.similarity``.

    ``path='arrays'`` (the default) samples, scores and selects on arrays and builds only the K
    chosen Strategy objects; ``path='objects'`` is the reference: it decodes every draw into a
    Strategy, checks memory with ``MemoryModel.check``, scores with ``Simulator.predict`` (or the
    scorer on the encoded objects) and selects with ``select_diverse``. For the same seed both
    choose the same set (tests/search/test_round.py).

    ``exclude``: strategies already tried (by content, ``strategy_key``'s meaning); ones that
    cannot be drawn (a hybrid plan, staleness, another model) are ignored; ``exclude_ids`` are
    content hashes of more of them (``RoundResult.identities``, ``ChoiceArrays.identity``), which a
    caller that runs many rounds keeps instead of re-encoding its tried strategies. ``lossy_only`` drops
    samples that compress no shard (the lossy half of a lossy search's round). ``sampler`` may be
    passed to continue a stream across rounds (the searcher does); otherwise one is made from
    ``seed``, ``space``, ``memory`` (None: default MemoryConfig; False: no memory check),
    ``constraints`` and ``defaults.sampler``.
    """
    if k < 1 or samples < k:
        raise ValueError(f"samples/k: need samples >= k >= 1, got samples={samples}, k={k}")
    sp = sampler.space if sampler is not None else Space(model, cluster, space)
    mm = None if memory is False else MemoryModel(model, cluster, memory or None)
    if sampler is None:
        sampler = ArraySampler(
            sp,
            seed,
            None if path == "objects" else mm,
            defaults.sampler,
            constraints if defaults.sampler == "constrained" else None,
            prior,
            chunk=min(CHUNK, samples),
        )
    excluded = _excluded_identities(sp, list(exclude)) | {int(i) for i in exclude_ids}
    run = _round_objects if path == "objects" else _round_arrays
    return run(
        model, cluster, scorer_for(scorer), sp, sampler, mm, samples, k, defaults, excluded, lossy_only
    )


def _clock() -> float:
    return time.process_time()


def _excluded_identities(space: Space, excluded: list[Strategy]) -> set[int]:
    """Identity hashes of the already-tried strategies that a sampler could draw."""
    out: set[int] = set()
    ma, ca = model_arrays(space.model), cluster_arrays(space.cluster)
    for s in excluded:
        try:
            b = encode(ma, ca, [s])
        except (ValueError, KeyError, IndexError):
            continue  # a hybrid plan or another model's strategy: never sampled
        if np.any(b.staleness != 0):
            continue
        out.add(int(ChoiceArrays.of_batch(b).identity()[0]))
    return out


def _round_arrays(
    model: ModelSpec,
    cluster: ClusterSpec,
    scorer: RoundScorer,
    space: Space,
    sampler: ArraySampler,
    memory: MemoryModel | None,
    samples: int,
    k: int,
    defaults: RoundDefaults,
    excluded: set[int],
    lossy_only: bool,
) -> RoundResult:
    times: dict[str, float] = {}
    t0 = _clock()
    drawn = sampler.sample_arrays(samples)
    t1 = _clock()
    times["sample"] = t1 - t0
    # pool: first occurrence of each content, not tried before, lossy when asked
    ident = drawn.identity()
    keep = _first_occurrences(ident)
    if excluded:
        keep &= ~np.isin(ident, np.array(sorted(excluded), dtype=np.uint64))
    if lossy_only:
        keep &= _lossy(drawn)
    pool = drawn if keep.all() else drawn.take(np.flatnonzero(keep))
    if pool.size == 0:
        raise AllTriedError(f"all {samples} sampled strategies were already tried in this search")
    t2 = _clock()
    times["pool"] = t2 - t1
    scored = _score_chunks(model, cluster, scorer, space, pool)
    t3 = _clock()
    times["score"] = t3 - t2
    k = min(k, pool.size)
    similarity = _similarity(defaults, scorer, model, cluster)

    def embed(index: np.ndarray) -> np.ndarray:
        sub = pool.take(index)
        return similarity.embed(SampleBatch(model, cluster, sub.batch(space)).strategies())

    rows = None
    if isinstance(similarity, FactorSimilarity):
        # the factor similarity's rows straight from the pool's columns: no take, no (N, V x 7) codes
        rows = functools.partial(similarity.rows_arrays, pool)
    qualified, choice = qualify_and_select(scored.seconds, k, embed, similarity, defaults, rows=rows)
    t4 = _clock()
    times["select"] = t4 - t3
    chosen = [int(qualified[i]) for i in choice.indices]
    strategies = [pool.strategy(space, i) for i in chosen]
    times["materialise"] = _clock() - t4
    ids = ident[np.flatnonzero(keep)[chosen]]
    return _result(
        scored, chosen, strategies, ids, choice, samples, pool.size, len(qualified), "arrays", times
    )


def _round_objects(
    model: ModelSpec,
    cluster: ClusterSpec,
    scorer: RoundScorer,
    space: Space,
    sampler: ArraySampler,
    memory: MemoryModel | None,
    samples: int,
    k: int,
    defaults: RoundDefaults,
    excluded: set[int],
    lossy_only: bool,
) -> RoundResult:
    """The reference: every sample a Strategy object, checked, scored and compared as objects."""
    times: dict[str, float] = {}
    t0 = _clock()
    drawn: list[Strategy] = []
    if sampler.memory is not None:
        raise ValueError("sampler: the object path checks memory on objects; pass one without memory")
    misses = 0
    while len(drawn) < samples:
        for s in sampler.sample(sampler.chunk):
            if memory is not None and not memory.check(s).ok:
                misses += 1
                continue
            if len(drawn) < samples:
                drawn.append(s)
        if misses > 50 * samples + sampler.chunk:
            raise InfeasibleSpaceError(f"{misses} infeasible draws for {len(drawn)}/{samples} strategies")
    t1 = _clock()
    times["sample"] = t1 - t0
    seen: set[str] = set()
    fresh: list[Strategy] = []
    for s in drawn:
        key = strategy_key(s)
        if key in seen or (lossy_only and space_of(s) == "lossless"):
            continue
        seen.add(key)
        fresh.append(s)
    if not fresh:
        raise AllTriedError(f"all {samples} sampled strategies were dropped (lossless in a lossy round)")
    ma, ca = model_arrays(model), cluster_arrays(cluster)
    every = np.concatenate([ChoiceArrays.of_batch(encode(ma, ca, part)).identity() for part in _parts(fresh)])
    pool = [s for s, i in zip(fresh, every.tolist(), strict=True) if i not in excluded]
    ids = [i for i in every.tolist() if i not in excluded]
    if not pool:
        raise AllTriedError(f"all {samples} sampled strategies were already tried in this search")
    t2 = _clock()
    times["pool"] = t2 - t1
    simulator = getattr(scorer, "simulator", None)
    if isinstance(scorer, AnalyticalScorer | SimulatorScorer) and isinstance(simulator, Simulator):
        seconds = np.concatenate([simulator.predict(model, cluster, part) for part in _parts(pool)])
        scored = RoundScores(seconds, scorer.name, calibrated=not simulator.is_ranker)
    else:
        scored = _concat_scores(
            [scorer.score(SampleBatch(model, cluster, encode(ma, ca, part), part)) for part in _parts(pool)]
        )
    t3 = _clock()
    times["score"] = t3 - t2
    k = min(k, len(pool))
    qualified = _qualified(scored.seconds, k, defaults.qualified_fraction)
    similarity = _similarity(defaults, scorer, model, cluster)
    picked = select_diverse(
        [pool[i] for i in qualified], scored.seconds[qualified], k, defaults.alpha, similarity
    )
    times["select"] = _clock() - t3
    choice = Choice(picked.indices, picked.predicted, picked.similarity, picked.alpha, picked.objective)
    chosen = [int(qualified[i]) for i in picked.indices]
    chosen_ids = np.array([ids[i] for i in chosen], dtype=np.uint64)
    return _result(
        scored,
        chosen,
        list(picked.strategies),
        chosen_ids,
        choice,
        samples,
        len(pool),
        len(qualified),
        "objects",
        times,
    )


def _parts(strategies: list[Strategy]) -> list[list[Strategy]]:
    """The strategies in the array path's scorer slices (``_score_slices``, by shard rows)."""
    rows = np.array([sum(len(vs.shards) for vs in s.variables) for s in strategies])
    return [strategies[lo:hi] for lo, hi in _score_slices(rows)]


def _first_occurrences(ident: np.ndarray) -> np.ndarray:
    """Mask: the first sample of each identity."""
    _, first = np.unique(ident, return_index=True)
    keep = np.zeros(len(ident), dtype=bool)
    keep[first] = True
    return keep


def _lossy(arrays: ChoiceArrays) -> np.ndarray:
    """Per strategy: some collective shard is compressed (``space_of`` == 'lossy')."""
    squeezed = (~np.asarray(arrays.is_ps)) & (np.asarray(arrays.compressor) != 0)
    counts = np.diff(arrays.offsets)
    return np.bincount(np.repeat(np.arange(arrays.size), counts), weights=squeezed, minlength=arrays.size) > 0


#: Shard rows per scorer call: the arrays of one call stay in the CPU caches (a 2,048-strategy
#: BERT-large call, 2 M rows, scored at half the speed of 256-strategy calls). 2^16 rows keeps a
#: call's float64 temporaries at 512 KB: at 2^18 (2 MB) each temporary was a fresh mmap whenever
#: glibc's adaptive mmap threshold was still low (a fresh process whose sampler made no large
#: temporaries: ~290k page faults); at 2^16 the faults stayed at the sampler's ~65k and a
#: BERT-large round's score stage took 0.6-0.75 s instead of 1.1-1.2 s (development runs on a
#: loaded 2-core host, issue 16).
SCORE_ROWS = 1 << 16


def _score_slices(rows: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive strategy ranges of about SCORE_ROWS rows each (at least one strategy)."""
    bounds = [0]
    cum = np.cumsum(rows)
    while bounds[-1] < len(rows):
        lo = bounds[-1]
        done = cum[lo - 1] if lo else 0
        bounds.append(max(lo + 1, int(np.searchsorted(cum, done + SCORE_ROWS, side="right"))))
    return list(itertools.pairwise(bounds))


def _score_chunks(
    model: ModelSpec, cluster: ClusterSpec, scorer: RoundScorer, space: Space, pool: ChoiceArrays
) -> RoundScores:
    """The scorer over the pool, about SCORE_ROWS shard rows per call (``_score_slices``)."""
    parts = [
        scorer.score(SampleBatch(model, cluster, pool.slice(lo, hi).batch(space)))
        for lo, hi in _score_slices(np.diff(pool.offsets))
    ]
    return _concat_scores(parts)


def _concat_scores(parts: list[RoundScores]) -> RoundScores:
    """One RoundScores of consecutive chunks' scores."""
    if len(parts) == 1:
        return parts[0]
    uncertainty = [p.uncertainty for p in parts]
    return RoundScores(
        seconds=np.concatenate([p.seconds for p in parts]),
        scorer=parts[0].scorer,
        uncertainty=None if any(u is None for u in uncertainty) else np.concatenate(uncertainty),  # type: ignore[arg-type]
        labels=None
        if all(p.labels is None for p in parts)
        else np.concatenate(
            [np.asarray([p.label(i) for i in range(len(p.seconds))], dtype=object) for p in parts]
        ),
        calibrated=all(p.calibrated for p in parts),
    )


def qualify_and_select(
    seconds: np.ndarray,
    k: int,
    embed: Callable[[np.ndarray], np.ndarray],
    similarity: Similarity,
    defaults: RoundDefaults = DEFAULTS,
    rows: Callable[[np.ndarray], Callable[[int], np.ndarray]] | None = None,
) -> tuple[np.ndarray, Choice]:
    """The round's last two steps on M scored samples: keep the best max(k, ceil(qualified_fraction
    x M)) (ties: sample order), then choose k of them by Eq. 11 (``select_embedded``, alpha of
    ``defaults``). ``embed(index)`` gives the similarity embedding of the samples ``index``
    (e.g. ``FactorSimilarity.embed_arrays`` of their arrays). ``rows``, when given, replaces
    ``embed``: ``rows(index)`` returns a function giving one similarity row of those samples at a
    time (``FactorSimilarity.rows_arrays``), and the choice is ``select_rows``' (the same Eq. 11;
    only the rows the greedy reads are computed). Returns the qualified sample indices (best
    first) and the choice, whose ``indices`` are positions among the qualified.

    For callers that score a given pool instead of sampling one (a replay on measured strategies).
    """
    qualified = _qualified(np.asarray(seconds, dtype=np.float64), k, defaults.qualified_fraction)
    scores = np.asarray(seconds)[qualified]
    if rows is not None:
        return qualified, select_rows(rows(qualified), scores, k, defaults.alpha)
    return qualified, select_embedded(embed(qualified), scores, k, defaults.alpha, similarity)


def _qualified(seconds: np.ndarray, k: int, fraction: float) -> np.ndarray:
    """The best-scored max(k, ceil(fraction x M)) samples, best first (ties: sample order)."""
    m = max(k, math.ceil(fraction * len(seconds)))
    return np.argsort(seconds, kind="stable")[:m]


def _similarity(
    defaults: RoundDefaults, scorer: RoundScorer, model: ModelSpec, cluster: ClusterSpec
) -> Similarity:
    if defaults.similarity == "factor":
        return FactorSimilarity(model)
    simulator = getattr(scorer, "simulator", None)
    if not isinstance(simulator, Simulator):
        raise ValueError(f"similarity: 'hidden' needs a simulator behind the scorer; {scorer.name} has none")
    return HiddenSimilarity(simulator, model, cluster)


def _result(
    scored: RoundScores,
    chosen: list[int],
    strategies: list[Strategy],
    ids: np.ndarray,
    choice: Choice,
    samples: int,
    pool: int,
    qualified: int,
    path: Literal["arrays", "objects"],
    times: dict[str, float],
) -> RoundResult:
    unc = scored.uncertainty
    return RoundResult(
        strategies=tuple(strategies),
        identities=tuple(int(i) for i in ids),
        indices=tuple(chosen),
        predicted=tuple(float(scored.seconds[i]) for i in chosen),
        uncertainty=tuple(None if unc is None else float(unc[i]) for i in chosen),
        scorers=tuple(scored.label(i) for i in chosen),
        similarity=choice.similarity,
        scorer=scored.scorer,
        samples=samples,
        pool=pool,
        qualified=qualified,
        alpha=choice.alpha,
        objective=choice.objective,
        path=path,
        timings=times,
    )
