"""One AutoSync round: sample M under the constraints → score → keep the qualified fraction → Eq. 11.

This module is the only implementation of a round (issue 16). The service's loop
(``service.loop_round``), the AutoSync searcher (``search.searchers.autosync``), the CLI's
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
safe to call from the service's worker process (no global state changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy as np

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
from simulator.spec import ClusterSpec, ModelSpec, Strategy


@dataclass(frozen=True)
class RoundDefaults:
    """How every round samples, filters and selects: one set of values, used everywhere.

    Each value and its reason:

    - ``sampler = "constrained"``: AutoSync §6, a partial strategy completed by c_lb (Algorithm 1)
      and c_am (Algorithm 2); 'random' (no constraints) is the ablation, kept for comparison.
    - ``qualified_fraction = 0.25``: AutoSync supplementary §7 keeps the best-predicted samples as
      "qualified" before the diverse selection. A quarter keeps the selection among strategies the
      scorer rates well (at M = 200, the top 50) while leaving Eq. 11 room to trade a little
      predicted time for diversity; at least K always qualify. The service used 0.25 and the
      AutoSync searcher 0.25 already: it is unchanged.
    - ``alpha = 0.1``: Eq. 11's weight of similarity against the normalised predicted time
      (``search.selection``: f̃ spans [0, 1] over the qualified set). Measured with factor
      similarity, two constrained samples share 20-45 % of their choices on BERT-large/B7 and
      25-60 % on NCF-sparse/A2 (10th-90th percentile, median 0.34 and 0.44). A candidate's greedy
      penalty is 2 alpha sum_{j in S} sim(x, j); over K - 1 = 7 picks the spread between a
      dissimilar (0.2) and a similar (0.45) candidate is 2 x 0.1 x 7 x 0.25 = 0.35 of the
      predicted-time span at alpha = 0.1: it breaks near-ties towards different strategies but
      does not prefer one predicted much slower. At the service's former 0.5 the same spread is
      1.75 spans, so the selection ignored the scores (it took the most dissimilar qualified
      strategies). The searcher, the CLI and the search-quality benchmark used 0.1; it is kept.
    - ``similarity = "factor"``: AutoSync §7's first approach (shared per-variable choices). It
      needs no model, so it works before any learned simulator exists and on integer-coded arrays
      (the array path); 'hidden' (cosine of a simulator's hidden vectors) is the alternative.
    """

    sampler: Literal["constrained", "random"] = "constrained"
    qualified_fraction: float = 0.25
    alpha: float = 0.1
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
