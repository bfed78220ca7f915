"""AutoSync's linear ranker: a pairwise logistic model on the global features z (scikit-learn).

For two strategies a, b of one domain, P(a slower than b) = σ(w · (z_a - z_b)), fitted with
``sklearn.linear_model.LogisticRegression`` on standardised feature differences of pairs with
distinct measured times (both orientations, no intercept). The score of a strategy is w · z;
``predict`` returns exp(score), a positive ranking score (``is_ranker``), and ``hidden`` the
standardised z.

Shapes: z (N, NUM_GLOBAL_FEATURES) → score (N,).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression

from simulator.base import Simulator
from simulator.learned.data import EncodedDomain
from simulator.learned.features import NUM_GLOBAL_FEATURES, FeatureExtractor, StrategyGraph
from simulator.metrics import pairwise_accuracy
from simulator.spec import ClusterSpec, ModelSpec, Strategy

#: Inverse regularisation strengths tried; the best on validation wins.
C_GRID = (0.01, 0.1, 1.0, 10.0)
#: At most this many pairs per domain enter one fit (sampled, seeded).
MAX_PAIRS = 5000


class LinearRanker(Simulator):
    """w · standardise(z); see the module docstring."""

    name = "linear"
    is_ranker = True

    def __init__(self, coef: np.ndarray, mean: np.ndarray, std: np.ndarray) -> None:
        self.coef = np.asarray(coef, dtype=np.float64).reshape(NUM_GLOBAL_FEATURES)
        self.mean = np.asarray(mean, dtype=np.float64).reshape(NUM_GLOBAL_FEATURES)
        self.std = np.asarray(std, dtype=np.float64).reshape(NUM_GLOBAL_FEATURES)

    def state(self) -> dict[str, np.ndarray]:
        return {"coef": self.coef, "mean": self.mean, "std": self.std}

    def _z(self, graphs: Sequence[StrategyGraph]) -> np.ndarray:
        z = (
            np.stack([g.z for g in graphs]).astype(np.float64)
            if graphs
            else np.zeros((0, NUM_GLOBAL_FEATURES))
        )
        return (z - self.mean) / self.std

    def outputs(self, graphs: Sequence[StrategyGraph]) -> np.ndarray:
        return self._z(graphs) @ self.coef

    def predict(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        fx = FeatureExtractor(model, cluster)
        return np.exp(np.clip(self.outputs(fx.many(strategies)), -60.0, 60.0))

    def hidden(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        fx = FeatureExtractor(model, cluster)
        return self._z(fx.many(strategies))


def _pairs(
    data: EncodedDomain, rng: np.random.Generator, max_pairs: int = MAX_PAIRS
) -> tuple[np.ndarray, np.ndarray]:
    """Feature differences of pairs with distinct times (both orientations) and 1 = first is slower."""
    z = np.stack([g.z for g in data.graphs]).astype(np.float64)
    return pairs_of(z, data.times, rng, max_pairs)


def pairs_of(
    z: np.ndarray, times: np.ndarray, rng: np.random.Generator, max_pairs: int = MAX_PAIRS
) -> tuple[np.ndarray, np.ndarray]:
    """``_pairs`` on a global-feature matrix z (N, F) and its measured times (N,)."""
    i, j = np.triu_indices(len(times), k=1)
    keep = times[i] != times[j]
    i, j = i[keep], j[keep]
    if len(i) > max_pairs:
        pick = rng.choice(len(i), max_pairs, replace=False)
        i, j = i[pick], j[pick]
    diff = z[i] - z[j]
    slower = (times[i] > times[j]).astype(np.int64)
    return np.vstack([diff, -diff]), np.concatenate([slower, 1 - slower])


def fit_linear(
    train: Sequence[EncodedDomain],
    val: Sequence[EncodedDomain],
    seed: int = 0,
    weights: Sequence[float] | None = None,
) -> LinearRanker:
    """Fit the pairwise logistic ranker; pick C by mean validation pairwise accuracy.

    ``weights`` (one per training domain) scale its pairs' sample weight, so a few points of a
    new domain can count as much as many points of the old ones when fine-tuning.
    """
    rng = np.random.default_rng(seed)
    zs = np.concatenate([np.stack([g.z for g in d.graphs]) for d in train if len(d)]).astype(np.float64)
    mean = zs.mean(axis=0)
    std = zs.std(axis=0)
    std = np.where(std > 1e-6, std, 1.0)
    xs, ys, ws = [], [], []
    for k, d in enumerate(train):
        if len(d) < 2:
            continue
        x, y = _pairs(d, rng)
        xs.append(x / std)
        ys.append(y)
        ws.append(np.full(len(y), (weights[k] if weights else 1.0) / max(1, len(y))))
    if not xs or len(np.unique(np.concatenate(ys))) < 2:
        raise ValueError("the linear ranker needs at least one pair with distinct measured times")
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    w = w * len(w) / w.sum()
    best: tuple[float, LinearRanker] | None = None
    for c in C_GRID:
        lr = LogisticRegression(C=c, fit_intercept=False, max_iter=500)
        lr.fit(x, y, sample_weight=w)
        ranker = LinearRanker(lr.coef_.reshape(-1), mean, std)
        accs = [pairwise_accuracy(ranker.outputs(d.graphs), d.times) for d in val if len(d) >= 2]
        accs = [a for a in accs if np.isfinite(a)]
        score = float(np.mean(accs)) if accs else -c  # no validation: the most regularised fit
        if best is None or score > best[0]:
            best = (score, ranker)
    assert best is not None
    return best[1]
