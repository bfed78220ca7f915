"""The in-domain fine-tuned ranker: Eq. 1-3's log time plus a learned residual (issue 16).

Why. Fine-tuning the transfer ensemble (``transfer.EnsembleTrainer.fit(target)``) keeps its
source domains' pairs and one linear ranker over z, and on runtimes-v2 it ranked held-out
strategies of ResNet50__B1 *worse* than the analytical model (0.615 vs 0.684,
search_quality_measured-2026-11-25-runtimes-v2): a learned model that does not start from the
analytical ranking can fall below it. This model starts from it: per strategy

    log t̂ = log T_Eq.1-3 + ½ (ridge(z) + hgb(z, log T_Eq.1-3))

where both parts are fitted on the target domain's measured strategies only, to the residual
log t - log T_Eq.1-3: ``ridge`` a linear ridge regression on the standardised global z
(``alpha`` = 10), ``hgb`` scikit-learn's ``HistGradientBoostingRegressor`` (100 trees of depth
3, learning rate 0.05, >= 20 strategies per leaf, so below 40 strategies it makes no split and
adds a constant). With too little data both shrink to a constant residual, i.e. to the
analytical ranking itself. The source domains are left out on purpose: adding their pairs
(weighted as the transfer ensemble does) lowered held-out accuracy on every runtimes-v2 domain
in the exploration below; the transfer ensemble remains the cold-start model.

How it was chosen (so the reader can judge the figures): on the five runtimes-v2 domains, held
out 30 % by the seeded hash split, split seeds 0-4, candidates were: the transfer ensemble
fine-tuned (mean held-out pairwise over the seeds 0.804 / 0.759 / 0.902 / 0.826 / 0.637 on
BERT-3L__B5 / BERT-6L__B9 (128 records) / NCF-sparse__A2 / NCF-sparse__B10 / ResNet50__B1),
a pairwise logistic ranker with the analytical log time as a free offset (0.867 / 0.857 / 0.909
/ 0.832 / 0.729 at L2 1e-3), ridge residual (alpha 10: 0.863 / 0.865 / 0.904 / 0.814 / 0.735),
boosted-tree residual (0.861 / 0.864 / 0.908 / 0.817 / 0.760), and the mean of the last two
(0.875 / 0.866 / 0.909 / 0.823 / 0.755; Eq. 1-3 0.732 / 0.788 / 0.857 / 0.731 / 0.676). The
mean was kept: best or within 0.01 of the best on every domain. These figures were seen while
choosing, so the benchmark reports the fine-tuned figure on split seeds the choice did not look
at, and the per-domain pick between this model, the fine-tuned transfer ensemble and Eq. 1-3 is
made by cross-validation on the train split only (``fine_tune``).

Ensemble. ``members`` models, member m fitted on a bootstrap resample of the target (seeded by
(seed, m)); the score is the members' mean log t̂, their disagreement the hybrid scorer's
uncertainty (the same interface as ``transfer.TransferEnsemble``: ``member_scores(z)``,
``scores(z)``, ``extractor``). The analytical log time is read from z's
``ctx_log_estimate_ms`` column (log1p of Eq. 1-3's milliseconds, default constants), so scoring
needs z only, like the transfer ensemble.

Versions. ``pretrained.pretrain_version(..., target=...)`` saves the model ``fine_tune`` chose; a
residual model is registry kind ``residual``, stored as plain arrays (``state``: the ridge
weights and the boosted trees' nodes, ``_Trees``), and the service scores a domain with it like
a fine-tuned transfer version (hybrid scorer, same fallback rule; ``service.loop.simulators``).

Shapes: z (N, F = NUM_GLOBAL_FEATURES); member scores (E, N).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import Ridge
from threadpoolctl import threadpool_limits

from simulator.learned.features import GLOBAL_FEATURE_NAMES, NUM_GLOBAL_FEATURES
from simulator.learned.transfer import (
    DomainZ,
    EnsembleTrainer,
    ScorerDecision,
    TransferEnsemble,
    ZEnsemble,
    choose_from_lodo,
    out_of_fold,
)
from simulator.metrics import pairwise_accuracy
from simulator.spec import ClusterSpec, ModelSpec, Strategy

#: Kind name of the residual ensemble (logs, decisions).
KIND = "residual"
#: Column of z holding log1p(Eq. 1-3 milliseconds).
ESTIMATE_COLUMN = GLOBAL_FEATURE_NAMES.index("ctx_log_estimate_ms")


def analytical_log_seconds(z: np.ndarray) -> np.ndarray:
    """log of Eq. 1-3's seconds per iteration from z's ``ctx_log_estimate_ms`` column, (N, F) → (N,)."""
    ms = np.expm1(np.asarray(z, dtype=np.float64)[:, ESTIMATE_COLUMN])
    return np.log(np.maximum(ms, 1e-9) / 1e3)


@dataclass(frozen=True)
class ResidualConfig:
    """The residual model's recipe (module docstring)."""

    members: int = 5  # bootstrap members (uncertainty = their disagreement)
    ridge_alpha: float = 10.0
    trees: int = 100
    learning_rate: float = 0.05
    max_depth: int = 3
    min_leaf: int = 20
    seed: int = 0
    folds: int = 4  # cross-fitting folds of ``fine_tune``'s choice
    min_held_out: int = 8  # below this many measured strategies ``fine_tune`` uses the LODO rule

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Trees:
    """Boosted regression trees as arrays: T trees of up to Nn nodes, prediction = base + sum of
    the leaves reached (scikit-learn's leaf values already carry the learning rate).

    Taken from a fitted ``HistGradientBoostingRegressor`` (``of``; its ``_predictors`` node
    records, numerical splits only: x <= threshold goes left, NaN goes where the split says), so
    a version is plain arrays in the registry (``ResidualEnsemble.state``) and loads without
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
    def of(cls, hgb: HistGradientBoostingRegressor) -> _Trees:
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
    def empty(cls, t: int, nn: int, base: float = 0.0) -> _Trees:
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


@dataclass
class _Member:
    mean: np.ndarray  # (F,) standardisation of the ridge's input
    std: np.ndarray
    coef: np.ndarray  # (F,) ridge weights on the standardised z
    intercept: float
    trees: _Trees | None  # None: too few strategies to fit; the residual is ``offset``
    offset: float  # mean residual

    def residual(self, z: np.ndarray, log_a: np.ndarray) -> np.ndarray:
        if self.trees is None:
            return np.full(len(z), self.offset)
        ridge = (z - self.mean) / self.std @ self.coef + self.intercept
        return 0.5 * (ridge + self.trees.predict(np.column_stack([z, log_a])))


#: Keys of ``ResidualEnsemble.state`` (one row per member; tree arrays padded to common shapes).
STATE_KEYS = ("mean", "std", "coef", "intercept", "offset", "fitted", "base", "depth",
              "feature", "threshold", "nan_left", "left", "right", "leaf", "value")  # fmt: skip


class ResidualEnsemble(ZEnsemble):
    """Members predicting log seconds = log Eq. 1-3 + residual; lower score = faster."""

    name = KIND

    def __init__(self, members: Sequence[_Member]) -> None:
        if not members:
            raise ValueError("members: need at least one")
        super().__init__()
        self._members = list(members)

    @property
    def members(self) -> int:
        return len(self._members)

    def member_scores(self, z: np.ndarray) -> np.ndarray:
        """Every member's predicted log seconds of every strategy, shape (E, N)."""
        z = np.asarray(z, dtype=np.float64).reshape(-1, NUM_GLOBAL_FEATURES)
        log_a = analytical_log_seconds(z)
        if len(z) == 0:
            return np.zeros((self.members, 0))
        return np.stack([log_a + m.residual(z, log_a) for m in self._members])

    def hidden(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        m = self._members[0]
        return (self.z_of(model, cluster, strategies) - m.mean) / m.std

    def state(self) -> dict[str, np.ndarray]:
        """Plain arrays (the registry's weights), one row per member (``STATE_KEYS``)."""
        f = NUM_GLOBAL_FEATURES
        t = max((len(m.trees.feature) for m in self._members if m.trees is not None), default=0)
        nn = max((m.trees.feature.shape[1] for m in self._members if m.trees is not None), default=1)
        trees = []
        for m in self._members:
            padded = _Trees.empty(t, nn, m.trees.base if m.trees else 0.0)
            if m.trees is not None:
                mt, mn = m.trees.feature.shape
                for name in ("feature", "threshold", "nan_left", "left", "right", "leaf", "value"):
                    getattr(padded, name)[:mt, :mn] = getattr(m.trees, name)
                padded.depth = m.trees.depth
            trees.append(padded)
        zeros = np.zeros(f)
        return {
            "mean": np.stack([m.mean for m in self._members]),
            "std": np.stack([m.std for m in self._members]),
            "coef": np.stack([m.coef if m.trees is not None else zeros for m in self._members]),
            "intercept": np.array([m.intercept for m in self._members]),
            "offset": np.array([m.offset for m in self._members]),
            "fitted": np.array([m.trees is not None for m in self._members]),
            "base": np.array([tr.base for tr in trees]),
            "depth": np.array([tr.depth for tr in trees], dtype=np.int64),
            **{
                name: np.stack([getattr(tr, name) for tr in trees])
                for name in ("feature", "threshold", "nan_left", "left", "right", "leaf", "value")
            },
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> ResidualEnsemble:
        """The ensemble ``state`` describes (the inverse of ``state``)."""
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"residual state: missing {', '.join(missing)}")
        s = {k: np.asarray(state[k]) for k in STATE_KEYS}
        members = []
        for e in range(len(s["mean"])):
            trees = None
            if bool(s["fitted"][e]):
                trees = _Trees(
                    s["feature"][e].astype(np.int64), s["threshold"][e].astype(np.float64),
                    s["nan_left"][e].astype(bool), s["left"][e].astype(np.int64),
                    s["right"][e].astype(np.int64), s["leaf"][e].astype(bool),
                    s["value"][e].astype(np.float64), float(s["base"][e]), int(s["depth"][e]),
                )  # fmt: skip
            members.append(
                _Member(
                    s["mean"][e].astype(np.float64),
                    s["std"][e].astype(np.float64),
                    s["coef"][e].astype(np.float64),
                    float(s["intercept"][e]),
                    trees,
                    float(s["offset"][e]),
                )
            )
        return cls(members)


def _fit_member(z: np.ndarray, t: np.ndarray, config: ResidualConfig) -> _Member:
    log_a = analytical_log_seconds(z)
    y = np.log(t) - log_a
    mean, std = z.mean(axis=0), z.std(axis=0)
    std = np.where(std > 1e-6, std, 1.0)
    offset = float(y.mean())
    if len(t) < 2:
        return _Member(mean, std, np.zeros(len(mean)), 0.0, None, offset)
    with threadpool_limits(1):
        ridge = Ridge(alpha=config.ridge_alpha).fit((z - mean) / std, y)
        hgb = HistGradientBoostingRegressor(
            max_iter=config.trees,
            learning_rate=config.learning_rate,
            max_depth=config.max_depth,
            min_samples_leaf=config.min_leaf,
            random_state=config.seed,
        ).fit(np.column_stack([z, log_a]), y)
    return _Member(mean, std, ridge.coef_.astype(np.float64), float(ridge.intercept_), _Trees.of(hgb), offset)


def fit_residual(
    target: DomainZ, config: ResidualConfig = ResidualConfig(), members: int | None = None
) -> ResidualEnsemble:
    """The residual ensemble on ``target``'s measured strategies (bootstrap members; module docstring)."""
    if len(target) < 2:
        raise ValueError("target: need at least 2 measured strategies")
    out = []
    for m in range(members or config.members):
        rng = np.random.default_rng([config.seed, m, len(target)])
        pick = rng.integers(0, len(target), len(target))
        out.append(_fit_member(target.z[pick], target.times[pick], config))
    return ResidualEnsemble(out)


Candidate = Literal["residual", "transfer", "analytical"]
#: A model ``fine_tune`` may return and the round scorers (``scoring``) take: both score z alone.
Ranker = ResidualEnsemble | TransferEnsemble


@dataclass(frozen=True)
class FineTuneDecision:
    """Which model ranks the target after fine-tuning, and the cross-validated evidence.

    ``accuracy``: out-of-fold pairwise accuracy per candidate on the target's measured
    strategies (NaN where not evaluated); ``choice``: the best, ties going to the simpler one
    (analytical, then transfer, then residual).
    """

    choice: Candidate
    evidence: Literal["cross-validated", "lodo"]
    accuracy: dict[str, float]
    strategies: int

    def as_dict(self) -> dict[str, Any]:
        acc = {k: (None if v != v else v) for k, v in self.accuracy.items()}
        return {
            "choice": self.choice,
            "evidence": self.evidence,
            "accuracy": acc,
            "strategies": self.strategies,
        }


def cross_validated(
    trainer: EnsembleTrainer, target: DomainZ, config: ResidualConfig = ResidualConfig()
) -> dict[str, float]:
    """Out-of-fold pairwise accuracy of each candidate on ``target`` (folds by position mod ``folds``).

    Each fold is scored by a one-member model fitted on the other folds (``transfer.out_of_fold``:
    no strategy is scored by a model that saw it; one member, not all, so the cross-fit costs
    ``folds`` fits per candidate between rounds); the analytical model needs no fit.
    """
    res = out_of_fold(target, config.folds, lambda train: fit_residual(train, config, members=1))
    tra = (
        out_of_fold(target, config.folds, lambda train: trainer.fit(train, members=1))
        if trainer.sources
        else None
    )
    return {
        "residual": pairwise_accuracy(res, target.times),
        "transfer": pairwise_accuracy(tra, target.times) if tra is not None else float("nan"),
        "analytical": pairwise_accuracy(target.analytical, target.times),
    }


def fine_tune(
    trainer: EnsembleTrainer,
    target: DomainZ | None,
    lodo: dict[str, dict[str, dict[str, float]]],
    config: ResidualConfig = ResidualConfig(),
) -> tuple[Ranker | None, FineTuneDecision]:
    """The model that ranks ``target`` after fine-tuning, chosen on the target's own measurements.

    With at least ``min_held_out`` measured strategies: the candidate with the best out-of-fold
    accuracy (``cross_validated``) on them, fitted on all of them (None = the analytical model).
    Below that, the LODO half of the fallback rule decides between the transfer ensemble
    (fine-tuned on what there is) and the analytical model.
    """
    if target is None or len(target) < config.min_held_out:
        lodo_rule: ScorerDecision = choose_from_lodo(lodo)
        acc = {"transfer": lodo_rule.learned_accuracy, "analytical": lodo_rule.analytical_accuracy}
        if lodo_rule.choice == "analytical" or not trainer.sources:
            return None, FineTuneDecision("analytical", "lodo", acc, lodo_rule.strategies)
        return trainer.fit(target), FineTuneDecision("transfer", "lodo", acc, lodo_rule.strategies)
    acc = cross_validated(trainer, target, config)
    order: tuple[Candidate, ...] = ("analytical", "transfer", "residual")
    finite = [c for c in order if np.isfinite(acc[c])]
    if not finite:
        return None, FineTuneDecision("analytical", "cross-validated", acc, len(target))
    best = max(finite, key=lambda c: acc[c])  # first maximum: ties go to the simpler model
    decision = FineTuneDecision(best, "cross-validated", acc, len(target))
    if best == "residual":
        return fit_residual(target, config), decision
    if best == "transfer":
        return trainer.fit(target), decision
    return None, decision
