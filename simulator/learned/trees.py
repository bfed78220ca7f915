"""Boosted regression trees as plain arrays, read from a fitted scikit-learn model (issue 16).

The residual model (``residual``) stores its trees this way, so a registry version holds numbers
only (no pickle) and predicts without scikit-learn's objects.

Shapes: T trees of up to Nn nodes; inputs (N, F') → predictions (N,).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor


@dataclass
class ArrayTrees:
    """Boosted regression trees as arrays: T trees of up to Nn nodes, prediction = base + sum of
    the leaves reached (scikit-learn's leaf values already carry the learning rate).

    Taken from a fitted ``HistGradientBoostingRegressor`` (``of``; its ``_predictors`` node
    records, numerical splits only: x <= threshold goes left, NaN goes where the split says), so
    a version is plain arrays in the registry (``residual.ResidualEnsemble.state``) and loads without
    unpickling. Node 0 is each tree's root; padding nodes are leaves of value 0.
    """

    feature: np.ndarray  # (T, Nn) int64
    threshold: np.ndarray  # (T, Nn) float64
    nan_left: np.ndarray  # (T, Nn) bool
    left: np.ndarray  # (T, Nn) int64
    right: np.ndarray  # (T, Nn) int64
    leaf: np.ndarray  # (T, Nn) bool
    value: np.ndarray  # (T, Nn) float64
    base: float
    depth: int

    @classmethod
    def of(cls, hgb: HistGradientBoostingRegressor) -> ArrayTrees:
        trees = [it[0].nodes for it in hgb._predictors]
        if any(bool(n["is_categorical"].any()) for n in trees):
            raise ValueError("categorical splits are not supported")
        t, nn = len(trees), max((len(n) for n in trees), default=1)
        out = cls.empty(t, nn, float(np.asarray(hgb._baseline_prediction).reshape(-1)[0]))
        for k, n in enumerate(trees):
            m = len(n)
            out.feature[k, :m] = n["feature_idx"]
            out.threshold[k, :m] = n["num_threshold"]
            out.nan_left[k, :m] = n["missing_go_to_left"].astype(bool)
            out.left[k, :m] = n["left"]
            out.right[k, :m] = n["right"]
            out.leaf[k, :m] = n["is_leaf"].astype(bool)
            out.value[k, :m] = n["value"]
            out.depth = max(out.depth, int(n["depth"].max()))
        return out

    @classmethod
    def empty(cls, t: int, nn: int, base: float = 0.0) -> ArrayTrees:
        i = np.zeros((t, nn), dtype=np.int64)
        return cls(i, np.zeros((t, nn)), np.zeros((t, nn), bool), i.copy(), i.copy(),
                   np.ones((t, nn), bool), np.zeros((t, nn)), base, 0)  # fmt: skip

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(N, F') → (N,): every tree walked at once, one level per step."""
        x = np.asarray(x, dtype=np.float64)
        t = np.arange(len(self.feature))[:, None]
        rows = np.arange(len(x))[None, :]
        node = np.zeros((len(self.feature), len(x)), dtype=np.int64)
        for _ in range(self.depth):
            v = x[rows, self.feature[t, node]]
            go_left = np.where(np.isnan(v), self.nan_left[t, node], v <= self.threshold[t, node])
            step = np.where(go_left, self.left[t, node], self.right[t, node])
            node = np.where(self.leaf[t, node], node, step)
        return self.base + self.value[t, node].sum(axis=0)
