"""A forest of regression trees as plain arrays, read from a fitted scikit-learn forest (issue 16).

The residual model (``residual``) stores its trees this way, so a registry version holds numbers
only (no pickle) and predicts without scikit-learn's objects.

Shapes: T trees of up to Nn nodes; inputs (N, F') → predictions (N,).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor


@dataclass
class ArrayTrees:
    """Regression trees as arrays: T trees of up to Nn nodes, prediction = base + sum of the
    leaves reached (a forest's leaf values are stored divided by T, so the sum is its mean).

    Taken from a fitted ``ExtraTreesRegressor`` or ``RandomForestRegressor`` (``of_forest``; each
    tree's ``tree_`` arrays: x <= threshold goes left, NaN goes where the split says), so a
    version is plain arrays in the registry (``residual.ResidualEnsemble.state``) and loads
    without unpickling. Node 0 is each tree's root; padding nodes are leaves of value 0.
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
    def of_forest(cls, forest: ExtraTreesRegressor | RandomForestRegressor) -> ArrayTrees:
        trees = [e.tree_ for e in forest.estimators_]
        if getattr(forest, "n_outputs_", 1) != 1:
            raise ValueError("forest: one output only")
        t, nn = len(trees), max((tr.node_count for tr in trees), default=1)
        out = cls.empty(t, nn)
        for k, tr in enumerate(trees):
            m = tr.node_count
            leaf = tr.children_left < 0
            out.feature[k, :m] = np.where(leaf, 0, tr.feature)
            out.threshold[k, :m] = tr.threshold
            out.nan_left[k, :m] = np.asarray(tr.missing_go_to_left, dtype=bool)
            out.left[k, :m] = np.where(leaf, 0, tr.children_left)
            out.right[k, :m] = np.where(leaf, 0, tr.children_right)
            out.leaf[k, :m] = leaf
            out.value[k, :m] = tr.value[:, 0, 0] / t
            out.depth = max(out.depth, int(tr.max_depth))
        return out

    @classmethod
    def empty(cls, t: int, nn: int, base: float = 0.0) -> ArrayTrees:
        i = np.zeros((t, nn), dtype=np.int64)
        return cls(i, np.zeros((t, nn)), np.zeros((t, nn), bool), i.copy(), i.copy(),
                   np.ones((t, nn), bool), np.zeros((t, nn)), base, 0)  # fmt: skip

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(N, F') → (N,): every tree walked at once, one level per step. x is compared in
        float32, as scikit-learn's trees compare it (their thresholds lie between float32 values)."""
        x = np.asarray(x, dtype=np.float32).astype(np.float64)
        t = np.arange(len(self.feature))[:, None]
        rows = np.arange(len(x))[None, :]
        node = np.zeros((len(self.feature), len(x)), dtype=np.int64)
        for _ in range(self.depth):
            v = x[rows, self.feature[t, node]]
            go_left = np.where(np.isnan(v), self.nan_left[t, node], v <= self.threshold[t, node])
            step = np.where(go_left, self.left[t, node], self.right[t, node])
            node = np.where(self.leaf[t, node], node, step)
        return self.base + self.value[t, node].sum(axis=0)
