"""Diverse candidate selection, AutoSync supplementary §7, Eq. 11.

From M qualified strategies with predicted scores f̂, choose K minimising

    J(S) = sum_{i in S} f̃(S_i) + alpha * sum_{i in S} sum_{j in S} sim(S_i, S_j)        (Eq. 11)

Normalisation: f̃ = (f̂ - min f̂) / (max f̂ - min f̂) over the M candidates, in [0, 1] (all 0 when
every score is equal). Both terms are then unit-free, so alpha means "how many spans of the
candidates' predicted times one unit of similarity is worth", whatever the simulator's scale
(seconds, or a ranker's score). The diagonal sim(S_i, S_i) adds alpha x K, a constant for a given K.

Solver: J is a modular term plus alpha times a quadratic form with non-negative weights, so it is
supermodular and -J is submodular; minimising J under |S| = K is maximising a non-monotone
submodular function under a cardinality constraint, which AutoSync solves greedily (its [10],
Krause & Golovin). We use the standard greedy — start empty, add the candidate with the smallest
marginal increase f̃_e + 2 alpha sum_{j in S} sim(e, j) — because it costs O(K·M) similarity
evaluations (one row per pick), then a 1-swap local search (best improving exchange of a chosen
and an unchosen candidate, until none improves) because plain greedy has no constant-factor
guarantee for this objective: the swap pass makes the result at least a 1-swap local optimum.
That is multi-started over a fixed ladder of alphas (see ``select_diverse``), which makes the
chosen set's similarity monotone in alpha. With alpha = 0 the greedy takes the K best scores.
``select_exact`` enumerates all subsets, as the reference for small M.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from search.similarity.base import Similarity
from simulator.spec import Strategy


@dataclass(frozen=True)
class Selection:
    """The K chosen strategies (in pick order), their predicted times, and their pairwise similarity."""

    strategies: tuple[Strategy, ...]
    predicted: tuple[float, ...]  # f̂ of each chosen strategy, the simulator's scale
    similarity: tuple[tuple[float, ...], ...]  # K x K, sim of the chosen strategies
    indices: tuple[int, ...]  # positions among the M candidates
    alpha: float
    objective: float  # Eq. 11 with the normalised f̃

    @property
    def mean_pairwise_similarity(self) -> float:
        """Mean of sim over distinct pairs of the chosen set (0 for K < 2)."""
        k = len(self.indices)
        if k < 2:
            return 0.0
        s = np.array(self.similarity)
        return float((s.sum() - np.trace(s)) / (k * (k - 1)))


def normalise_scores(scores: np.ndarray) -> np.ndarray:
    """f̃ = (f̂ - min) / (max - min), or zeros when all scores are equal."""
    lo, hi = float(scores.min()), float(scores.max())
    return (scores - lo) / (hi - lo) if hi > lo else np.zeros_like(scores)


#: The fixed alpha ladder of the multi-start (0 and 10^-3 .. 10^2 at a quarter decade).
ALPHA_LADDER: tuple[float, ...] = (0.0, *(10 ** (x / 4) for x in range(-12, 9)))


def select_diverse(
    strategies: Sequence[Strategy],
    scores: Sequence[float] | np.ndarray,
    k: int,
    alpha: float,
    similarity: Similarity,
    ladder: Sequence[float] = ALPHA_LADDER,
) -> Selection:
    """Eq. 11 by greedy + 1-swap, multi-started over an alpha ladder.

    The greedy + swap is run for ``alpha`` and for every alpha' of ``ladder``; the set returned is
    the best of those under Eq. 11 with ``alpha``. Why: for alpha on the ladder every call picks
    the argmin over the same family of sets, so (exchange argument: J_a1(S1) <= J_a1(S2) and
    J_a2(S2) <= J_a2(S1) give (a2 - a1)(sim(S2) - sim(S1)) <= 0) the chosen set's similarity is
    non-increasing in alpha, as Eq. 11's exact optimum is; a single greedy run does not promise
    that. Pass ``ladder=()`` for the single run. Similarity rows are computed once per candidate
    ever picked, so the ladder costs little besides O(K x M) arithmetic per start.
    """
    f_hat, f = _prepare(strategies, scores, k, alpha)
    chosen, sim = _solve(f, k, alpha, _Rows(similarity.rows(similarity.embed(strategies)), len(f)), ladder)
    return _selection(strategies, f_hat, f, chosen, sim, alpha)


@dataclass(frozen=True)
class Choice:
    """Eq. 11's answer without Strategy objects: positions among the M candidates (pick order)."""

    indices: tuple[int, ...]
    predicted: tuple[float, ...]  # f̂ of each chosen candidate
    similarity: tuple[tuple[float, ...], ...]  # K x K
    alpha: float
    objective: float  # Eq. 11 with the normalised f̃


def select_embedded(
    embedded: np.ndarray,
    scores: Sequence[float] | np.ndarray,
    k: int,
    alpha: float,
    similarity: Similarity,
    ladder: Sequence[float] = ALPHA_LADDER,
) -> Choice:
    """``select_diverse`` on candidates already embedded (``similarity.embed`` or an array
    embedding of the same meaning, e.g. ``FactorSimilarity.embed_arrays``): the array path of a
    round, which never builds the M Strategy objects. Same solver, same result for equal rows."""
    if np.shape(scores) != (len(embedded),):
        raise ValueError(f"scores: shape {np.shape(scores)}, expected ({len(embedded)},)")
    return select_rows(similarity.rows(embedded), scores, k, alpha, ladder)


def select_rows(
    rows: Callable[[int], np.ndarray],
    scores: Sequence[float] | np.ndarray,
    k: int,
    alpha: float,
    ladder: Sequence[float] = ALPHA_LADDER,
) -> Choice:
    """``select_embedded`` given the similarity rows of the candidates (i -> sim(i, every
    candidate), as ``Similarity.rows`` or ``FactorSimilarity.rows_arrays`` return)."""
    f_hat, f = _prepare(range(np.size(scores)), scores, k, alpha)
    chosen, sim = _solve(f, k, alpha, _Rows(rows, len(f)), ladder)
    return Choice(
        indices=tuple(chosen),
        predicted=tuple(float(f_hat[i]) for i in chosen),
        similarity=tuple(tuple(float(x) for x in row) for row in sim),
        alpha=alpha,
        objective=float(f[chosen].sum() + alpha * sim.sum()),
    )


def _solve(
    f: np.ndarray, k: int, alpha: float, rows: _Rows, ladder: Sequence[float]
) -> tuple[list[int], np.ndarray]:
    """Greedy + swap for ``alpha`` and every rung of ``ladder``; the best set under ``alpha``."""
    best: tuple[float, list[int]] | None = None
    for start in dict.fromkeys([alpha, *ladder]):
        chosen = _greedy_swap(f, k, start, rows)
        value = _objective(f, chosen, alpha, rows)
        if best is None or value < best[0] - 1e-12:
            best = (value, chosen)
    assert best is not None
    chosen = best[1]
    return chosen, np.array([rows[i] for i in chosen])[:, chosen]


def select_exact(
    strategies: Sequence[Strategy],
    scores: Sequence[float] | np.ndarray,
    k: int,
    alpha: float,
    similarity: Similarity,
) -> Selection:
    """Eq. 11 by enumerating every K-subset (reference for small M; C(M, K) evaluations)."""
    f_hat, f = _prepare(strategies, scores, k, alpha)
    sim = similarity.matrix(strategies)
    best: tuple[float, tuple[int, ...]] | None = None
    for subset in itertools.combinations(range(len(strategies)), k):
        idx = list(subset)
        value = float(f[idx].sum() + alpha * sim[np.ix_(idx, idx)].sum())
        if best is None or value < best[0] - 1e-12:
            best = (value, subset)
    assert best is not None
    chosen = list(best[1])
    return _selection(strategies, f_hat, f, chosen, sim[np.ix_(chosen, chosen)], alpha)


def _prepare(
    strategies: Sequence[object], scores: Sequence[float] | np.ndarray, k: int, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    f_hat = np.asarray(scores, dtype=np.float64)
    if f_hat.shape != (len(strategies),):
        raise ValueError(f"scores: shape {f_hat.shape}, expected ({len(strategies)},)")
    if not np.all(np.isfinite(f_hat)):
        raise ValueError("scores: must be finite")
    if not 1 <= k <= len(strategies):
        raise ValueError(f"k: must be in 1..{len(strategies)} (the candidates), got {k}")
    if alpha < 0:
        raise ValueError(f"alpha: must be >= 0, got {alpha}")
    return f_hat, normalise_scores(f_hat)


class _Rows:
    """sim(i, every candidate), computed on first use."""

    def __init__(self, row: Callable[[int], np.ndarray], size: int) -> None:
        self._row = row
        self._size = size
        self._rows: dict[int, np.ndarray] = {}

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self._rows:
            r = self._row(i)
            if r.shape != (self._size,):
                raise ValueError(f"similarity rows: shape {r.shape}, expected ({self._size},)")
            self._rows[i] = r
        return self._rows[i]


def _objective(f: np.ndarray, chosen: list[int], alpha: float, rows: _Rows) -> float:
    return float(f[chosen].sum() + alpha * sum(rows[i][chosen].sum() for i in chosen))


def _greedy_swap(f: np.ndarray, k: int, alpha: float, rows: _Rows) -> list[int]:
    """Standard greedy on Eq. 11, then best-improvement 1-swap until no exchange improves."""
    chosen: list[int] = []
    pen = np.zeros(len(f))  # sum_{j in S} sim(x, j)
    for _ in range(k):
        marginal = f + 2 * alpha * pen
        marginal[chosen] = np.inf
        i = int(np.argmin(marginal))
        chosen.append(i)
        pen += rows[i]
    if alpha == 0:
        return chosen
    for _ in range(10 * k + 10):
        r = np.array([rows[i] for i in chosen])  # (K, M)
        c = np.array(chosen)
        # swapping chosen[t] out and x in changes J by
        # f_x - f_c + 2 alpha ((pen_x - sim(x, c)) - (pen_c - sim(c, c)))
        delta = (
            f[None, :]
            - f[c][:, None]
            + 2 * alpha * ((pen[None, :] - r) - (pen[c] - r[np.arange(k), c])[:, None])
        )
        delta[:, c] = np.inf
        t, x = np.unravel_index(int(np.argmin(delta)), delta.shape)
        if delta[t, x] >= -1e-12:
            break
        pen += rows[int(x)] - rows[chosen[t]]
        chosen[t] = int(x)
    return chosen


def _selection(
    strategies: Sequence[Strategy],
    f_hat: np.ndarray,
    f: np.ndarray,
    chosen: list[int],
    sim: np.ndarray,
    alpha: float,
) -> Selection:
    return Selection(
        strategies=tuple(strategies[i] for i in chosen),
        predicted=tuple(float(f_hat[i]) for i in chosen),
        similarity=tuple(tuple(float(x) for x in row) for row in sim),
        indices=tuple(chosen),
        alpha=alpha,
        objective=float(f[chosen].sum() + alpha * sim.sum()),
    )
