"""The pretrained transfer simulator: an ensemble of pairwise linear rankers over the global z.

Why this model (issue 16 item 2). AutoSync's domain-agnostic features exist so that a simulator
trained on other (model, cluster) domains ranks a new one before it has any measurement. The
transferred simulator is AutoSync's linear ranker (``simulator.learned.linear``: P(a slower than
b) = σ(w · (z_a - z_b)) on the standardised global features z) fitted on the pairs of every
training domain, each domain weighing the same. Of the learned kinds it is the one whose
leave-one-domain-out (LODO) accuracy was close to the networks' (benchmarks/results/
simulator_accuracy-2026-11-22.txt: transfer-0 linear 0.68-0.83 vs GAT 0.64-0.86) at a hundredth of
the training time, and the only one cheap enough to refit between rounds on two busy cores and to
bootstrap into an ensemble, which gives the hybrid scorer its uncertainty.

Ensemble. ``members`` rankers, member m fitted on a bootstrap resample of every domain's
strategies (seeded by (seed, m)), standardised with its own resample's mean and std. The score of
a strategy is the mean of the members' w·z (lower = faster; a ranking score, not seconds). Their
disagreement on a batch (``disagreement``) is the hybrid scorer's uncertainty.

Fine-tuning (AutoSync's retraining as runtimes arrive). The target domain's measured strategies
join every member's pairs (bootstrapped too: with few points the members then disagree more,
which is the point), weighted so that a target of ``full_weight_at`` strategies or more counts as
much as all source domains together, less in proportion below that. The members keep the source
standardisation (fitted on many more strategies). Source pairs are drawn once per member
(``EnsembleTrainer``), so a refit costs one logistic regression per member.

The fallback rule: the learned ranker is used only when it ranks the domain's *held-out* measured
strategies at least as well as the analytical model (pairwise accuracy on the same strategies).
Held out means not trained on: for the pretrained ensemble, every measured strategy of a domain it
was not trained on (``lodo_metrics``); after fine-tuning, out-of-fold predictions (``out_of_fold``)
on the domain's measurements, judged by ``tuning.fine_tune`` together with the residual model.
With too few measured strategies that evidence is too thin (a dozen points decided the old rule),
so the decision is the LODO one (``choose_from_lodo``): the learned ranker is used when its mean
LODO accuracy over the training domains (each scored by an ensemble trained without it) beats the
analytical model's mean on the same domains.

Provenance (``provenance``): every version records which runtime records trained it: per domain the
files (path, sha256, record count) or the service's runtime-record ids, the sha256 of each
distinct strategy key, and the code commit.

Shapes: z (N, F = NUM_GLOBAL_FEATURES); member scores (E, N); disagreement (N,).
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.stats import rankdata
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from simulator.analytical import AnalyticalSimulator, StrategyBatch, cluster_arrays, encode, model_arrays
from simulator.base import Simulator
from simulator.learned.data import Domain
from simulator.learned.features import NUM_GLOBAL_FEATURES, ExtractorCache, FeatureExtractor, StrategyGraph
from simulator.learned.linear import pairs_of
from simulator.learned.terms import NUM_TERMS
from simulator.metrics import pairwise_accuracy
from simulator.spec import ClusterSpec, ModelSpec, Strategy

#: Registry kind of the transfer ensemble.
KIND = "transfer-linear"


@dataclass(frozen=True)
class TransferConfig:
    """How the transfer ensemble is trained and fine-tuned (module docstring)."""

    members: int = 5  # rankers in the ensemble (uncertainty = their disagreement)
    c: float = 0.01  # inverse L2 strength of each logistic fit (the most regularised of linear.C_GRID)
    max_pairs: int = 1000  # pairs drawn per domain and member (a fit's cost is linear in them)
    seed: int = 0  # bootstrap and pair sampling
    full_weight_at: int = 20  # a target with this many strategies weighs as much as all sources

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DomainZ:
    """One domain reduced to what the rankers need: global z, sync terms, measured and analytical times.

    z (N, F) float64; times (N,) measured seconds; analytical (N,) Eq. 1-3 seconds (default
    constants), kept to judge the analytical model on exactly the same strategies; terms (N,
    NUM_TERMS) the additive synchronisation terms (``terms``; the residual model's inputs beside
    z). Without ``terms`` (a DomainZ made of z alone) they are zeros: the residual model's
    ``physical`` base is then a constant and its cross-validation does not pick it.
    """

    name: str
    z: np.ndarray
    times: np.ndarray
    analytical: np.ndarray
    domain: str = ""  # "<model>__<cluster>" (default: name); LODO leaves out every set of it
    terms: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.domain:
            object.__setattr__(self, "domain", self.name)
        if self.terms is None:
            object.__setattr__(self, "terms", np.zeros((len(self.times), NUM_TERMS)))
        elif self.terms.shape != (len(self.times), NUM_TERMS):
            raise ValueError(f"terms: expected shape {(len(self.times), NUM_TERMS)}, got {self.terms.shape}")

    @property
    def sync_terms(self) -> np.ndarray:
        """``terms`` as an array (never None after construction)."""
        assert self.terms is not None
        return self.terms

    def __len__(self) -> int:
        return len(self.times)

    def subset(self, index: Sequence[int] | np.ndarray) -> DomainZ:
        idx = np.asarray(index, dtype=np.int64)
        return DomainZ(
            self.name, self.z[idx], self.times[idx], self.analytical[idx], self.domain, self.sync_terms[idx]
        )


def domain_z(domain: Domain, name: str | None = None) -> DomainZ:
    """A measured ``Domain`` as ``DomainZ`` (one vectorised feature pass); ``name`` labels the set
    (e.g. "runtimes-v2/BERT-3L__B5" when two datasets measured one domain)."""
    ma, ca = model_arrays(domain.model), cluster_arrays(domain.cluster)
    batch = encode(ma, ca, list(domain.strategies))
    fx = FeatureExtractor(domain.model, domain.cluster)
    z = fx.global_z(batch).astype(np.float64)
    t = AnalyticalSimulator().score_batch(domain.model, domain.cluster, batch).t_iter
    return DomainZ(
        name or domain.name,
        z,
        domain.times.copy(),
        np.asarray(t, dtype=np.float64),
        domain.name,
        fx.sync_terms(batch),
    )


class ZEnsemble(Simulator):
    """An ensemble scored on the global z (and, where ``needs_terms``, the sync terms): subclasses
    give ``member_scores(z, terms)`` (E, N), lower = faster, in log seconds or a ranking score; the
    rest (mean score, the learned simulators' API, the domain's cached feature extractor, the
    inputs of strategies or of an encoded batch, predicted seconds) is shared."""

    is_ranker = True
    #: Whether ``member_scores`` reads the sync terms (``terms``); if not, they are not computed.
    needs_terms = False

    def __init__(self) -> None:
        self._extractors = ExtractorCache()

    @property
    def members(self) -> int:
        raise NotImplementedError

    def member_scores(self, z: np.ndarray, terms: np.ndarray | None = None) -> np.ndarray:
        """Every member's score of every strategy, shape (E, N)."""
        raise NotImplementedError

    def state(self) -> dict[str, np.ndarray]:
        """Plain arrays the registry saves (``registry.Registry.load`` rebuilds the ensemble)."""
        raise NotImplementedError

    def scores(self, z: np.ndarray, terms: np.ndarray | None = None) -> np.ndarray:
        """The ensemble's ranking score (N,): the members' mean, lower = faster."""
        return self.member_scores(z, terms).mean(axis=0)

    def outputs(self, graphs: Sequence[StrategyGraph]) -> np.ndarray:
        """The score of feature graphs (their global z), shape (N,): the learned simulators' API
        (graphs carry no sync terms: an ensemble that ``needs_terms`` raises)."""
        if not graphs:
            return np.zeros(0)
        return self.scores(np.stack([g.z for g in graphs]))

    def extractor(self, model: ModelSpec, cluster: ClusterSpec) -> FeatureExtractor:
        """The domain's feature extractor, cached per (model, cluster) object (thread-safe)."""
        return self._extractors.get(model, cluster)

    def batch_inputs(
        self, model: ModelSpec, cluster: ClusterSpec, batch: StrategyBatch
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(z, terms) of an encoded batch; terms None unless ``needs_terms`` (a round's array path)."""
        fx = self.extractor(model, cluster)
        z = fx.global_z(batch).astype(np.float64)
        return z, fx.sync_terms(batch) if self.needs_terms else None

    def z_of(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        return self.inputs_of(model, cluster, strategies)[0]

    def inputs_of(
        self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]
    ) -> tuple[np.ndarray, np.ndarray | None]:
        if not strategies:
            return np.zeros((0, NUM_GLOBAL_FEATURES)), np.zeros((0, NUM_TERMS))
        return self.batch_inputs(
            model, cluster, encode(model_arrays(model), cluster_arrays(cluster), list(strategies))
        )

    def predict(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        """Predicted seconds per iteration (exp of the mean score, read as log seconds)."""
        z, terms = self.inputs_of(model, cluster, strategies)
        return np.exp(np.clip(self.scores(z, terms), -60.0, 60.0))


class TransferEnsemble(ZEnsemble):
    """``members`` linear rankers; score = mean of w_m · standardise_m(z) (module docstring)."""

    name = KIND

    def __init__(self, coef: np.ndarray, mean: np.ndarray, std: np.ndarray) -> None:
        shape = (-1, NUM_GLOBAL_FEATURES)
        self.coef = np.asarray(coef, dtype=np.float64).reshape(shape)
        self.mean = np.asarray(mean, dtype=np.float64).reshape(shape)
        self.std = np.asarray(std, dtype=np.float64).reshape(shape)
        if not (len(self.coef) == len(self.mean) == len(self.std) >= 1):
            raise ValueError("coef/mean/std: need the same number (>= 1) of members")
        super().__init__()

    @property
    def members(self) -> int:
        return len(self.coef)

    def state(self) -> dict[str, np.ndarray]:
        return {"coef": self.coef, "mean": self.mean, "std": self.std}

    def member_scores(self, z: np.ndarray, terms: np.ndarray | None = None) -> np.ndarray:
        """Every member's score of every strategy, shape (E, N) (``terms`` are not read)."""
        z = np.asarray(z, dtype=np.float64).reshape(-1, NUM_GLOBAL_FEATURES)
        return np.einsum("enf,ef->en", (z[None] - self.mean[:, None]) / self.std[:, None], self.coef)

    def hidden(self, model: ModelSpec, cluster: ClusterSpec, strategies: Sequence[Strategy]) -> np.ndarray:
        z = self.z_of(model, cluster, strategies)
        return (z - self.mean[0]) / self.std[0]


def percentiles(scores: np.ndarray) -> np.ndarray:
    """Percentile rank of each entry within its row, in [0, 1] (ties share their mean rank);
    rows (E, N) or one row (N,); zeros for a batch of one."""
    s = np.asarray(scores, dtype=np.float64)
    n = s.shape[-1]
    return (rankdata(s, axis=-1) - 1.0) / (n - 1) if n > 1 else np.zeros_like(s)


def disagreement(member_scores: np.ndarray) -> np.ndarray:
    """Per strategy: std over members of its percentile rank within the batch, (E, N) → (N,).

    The unit is a fraction of the batch: 0.1 means the members place the strategy about ten
    percentiles apart. Ranks, not raw scores, because members' scores have different scales and
    only the order matters to a round. Zero for a batch of one strategy.
    """
    return percentiles(member_scores).std(axis=0)


@dataclass
class _MemberData:
    mean: np.ndarray
    std: np.ndarray
    x: np.ndarray  # standardised pair differences (P, F), both orientations
    y: np.ndarray  # 1 = first of the pair is slower
    w: np.ndarray  # sample weights: every source domain sums to 1


class EnsembleTrainer:
    """Source pairs drawn once per member; ``fit(target)`` refits every member (module docstring).

    With no source domain (a service that has measured one domain only) there is nothing to
    transfer: ``fit`` then needs a target and each member is the target's own ranker,
    standardised on its bootstrap resample of the target.
    """

    def __init__(self, sources: Sequence[DomainZ], config: TransferConfig = TransferConfig()) -> None:
        sources = [s for s in sources if len(s) >= 2]
        self.sources = tuple(sources)
        self.config = config
        self._members = [self._member(m) for m in range(config.members)]

    def _member(self, m: int) -> _MemberData:
        if not self.sources:
            f = NUM_GLOBAL_FEATURES
            return _MemberData(np.zeros(f), np.ones(f), np.zeros((0, f)), np.zeros(0, np.int64), np.zeros(0))
        rng = np.random.default_rng([self.config.seed, m])
        picks = [rng.integers(0, len(d), len(d)) for d in self.sources]
        pooled = np.concatenate([d.z[p] for d, p in zip(self.sources, picks, strict=True)])
        mean, std = pooled.mean(axis=0), pooled.std(axis=0)
        std = np.where(std > 1e-6, std, 1.0)
        xs, ys, ws = [], [], []
        for d, p in zip(self.sources, picks, strict=True):
            x, y = pairs_of(d.z[p], d.times[p], rng, self.config.max_pairs)
            if len(y):
                xs.append(x / std)
                ys.append(y)
                ws.append(np.full(len(y), 1.0 / len(y)))
        if not xs:
            raise ValueError("sources: no pair of strategies with distinct measured times")
        return _MemberData(mean, std, np.concatenate(xs), np.concatenate(ys), np.concatenate(ws))

    def fit(self, target: DomainZ | None = None, members: int | None = None) -> TransferEnsemble:
        """The ensemble on the sources, plus ``target``'s measured strategies when given
        (its first ``members`` members only, when given)."""
        chosen = self._members[: members or len(self._members)]
        coefs: list[np.ndarray] = []
        means: list[np.ndarray] = []
        stds: list[np.ndarray] = []
        for m, data in enumerate(chosen):
            x, y, w, mean, std = data.x, data.y, data.w, data.mean, data.std
            if target is not None and len(target) >= 2:
                rng = np.random.default_rng([self.config.seed, m, len(target)])
                pick = rng.integers(0, len(target), len(target))
                if not self.sources:
                    mean, std = target.z[pick].mean(axis=0), target.z[pick].std(axis=0)
                    std = np.where(std > 1e-6, std, 1.0)
                tx, ty = pairs_of(target.z[pick], target.times[pick], rng, self.config.max_pairs)
                if len(ty):
                    weight = max(1, len(self.sources)) * min(1.0, len(target) / self.config.full_weight_at)
                    x = np.vstack([x, tx / std])
                    y = np.concatenate([y, ty])
                    w = np.concatenate([w, np.full(len(ty), weight / len(ty))])
            if len(np.unique(y)) < 2:
                raise ValueError("no pair of strategies with distinct measured times to train on")
            means.append(mean)
            stds.append(std)
            # Newton-Cholesky: 4-5 iterations on these few features (lbfgs takes ~40); one BLAS
            # thread, since the fits are small and the service's cores are shared.
            lr = LogisticRegression(
                C=self.config.c, fit_intercept=False, max_iter=100, solver="newton-cholesky"
            )
            with threadpool_limits(1):
                lr.fit(x, y, sample_weight=w * len(w) / w.sum())
            coefs.append(lr.coef_.reshape(-1))
        return TransferEnsemble(
            np.stack(coefs),
            np.stack(means),
            np.stack(stds),
        )


def accuracy(ensemble: TransferEnsemble, domain: DomainZ) -> float:
    """Pairwise ranking accuracy of the ensemble's score on ``domain``'s measured times."""
    return pairwise_accuracy(ensemble.scores(domain.z), domain.times)


def analytical_accuracy(domain: DomainZ) -> float:
    """Pairwise ranking accuracy of Eq. 1-3 (default constants) on the same strategies."""
    return pairwise_accuracy(domain.analytical, domain.times)


def lodo_metrics(
    domains: Sequence[DomainZ], config: TransferConfig = TransferConfig()
) -> dict[str, dict[str, dict[str, float]]]:
    """Leave-one-domain-out: each set scored by an ensemble trained on the other domains' sets.

    Every set of the held-out (model, cluster) domain is left out of its training, whatever
    dataset it came from. Returns ``{set name: {"lodo": {"pairwise_accuracy"}, "analytical":
    {"pairwise_accuracy"}}}``; a set is left out when no other domain has pairs to train on.
    """
    out: dict[str, dict[str, dict[str, float]]] = {}
    ensembles: dict[str, TransferEnsemble] = {}
    for d in domains:
        others = [o for o in domains if o.domain != d.domain and len(o) >= 2]
        if not others or len(d) < 2:
            continue
        if d.domain not in ensembles:
            ensembles[d.domain] = EnsembleTrainer(others, config).fit()
        ens = ensembles[d.domain]
        out[d.name] = {
            "lodo": {"pairwise_accuracy": accuracy(ens, d)},
            "analytical": {"pairwise_accuracy": analytical_accuracy(d)},
        }
    return out


def out_of_fold(target: DomainZ, folds: int, fit: Callable[[DomainZ], Any]) -> np.ndarray:
    """Scores (N,) of ``target``'s strategies, each by a model ``fit`` on the other folds (folds by
    position modulo ``folds``, at least 2, at most N): no strategy is scored by a model that saw it."""
    n = len(target)
    folds = max(2, min(folds, n))
    score = np.empty(n)
    for f in range(folds):
        test = np.arange(f, n, folds)
        model = fit(target.subset(np.setdiff1d(np.arange(n), test)))
        score[test] = model.scores(target.z[test], target.sync_terms[test])
    return score


Choice = Literal["learned", "analytical"]


@dataclass(frozen=True)
class ScorerDecision:
    """The fallback rule's verdict and its evidence (shown in logs, versions and the benchmark)."""

    choice: Choice
    # "few": a domain with 2 to ResidualConfig.min_line - 1 measured strategies, ranked by the
    # blend without a choice (``tuning.fine_tune``)
    evidence: Literal["held-out", "lodo", "few"]
    learned_accuracy: float
    analytical_accuracy: float
    strategies: int  # measured strategies the evidence rests on (held-out) or LODO domains

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN accuracies, where there was no evidence, become None)."""
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in self.__dict__.items()}


def choose_from_lodo(lodo: dict[str, dict[str, dict[str, float]]]) -> ScorerDecision:
    """The LODO half of the rule: learned when its mean LODO accuracy beats the analytical mean."""
    rows = [
        (m["lodo"]["pairwise_accuracy"], m["analytical"]["pairwise_accuracy"])
        for m in lodo.values()
        if np.isfinite(m["lodo"]["pairwise_accuracy"]) and np.isfinite(m["analytical"]["pairwise_accuracy"])
    ]
    if not rows:
        return ScorerDecision("analytical", "lodo", float("nan"), float("nan"), 0)
    learned, analytical = (float(np.mean(c)) for c in zip(*rows, strict=True))
    return ScorerDecision(
        "learned" if learned > analytical else "analytical", "lodo", learned, analytical, len(rows)
    )


def key_digest(key: str) -> str:
    """A runtime record's strategy identity in a version's provenance: sha256 of its key, 16 hex."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def code_commit(root: Path | None = None) -> dict[str, Any]:
    """The git commit of the code that trains (and whether the tree had uncommitted changes)."""
    where = root or Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "simulator"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": head, "dirty": bool(dirty)}
