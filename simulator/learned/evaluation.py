"""Judging every simulator kind on each measured domain's test split (``strategist simulator eval``).

Kinds: ``analytical`` (AutoSync Eqs. 1-3 with φ, δ and efficiency fitted by least squares on the
domain's train split; ``analytical-default`` keeps the default constants), and the latest saved
``linear``, ``rnn`` and ``gat`` versions trained on the domain. A version's test split is
recomputed with the split seed it was trained with, so its training strategies never appear in
it (the split hashes each strategy). Missing versions are trained with the default recipe when
``train_missing`` is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from simulator.analytical import AnalyticalSimulator, CostParams, FitSample
from simulator.analytical import fit as fit_analytical
from simulator.learned.data import Domain, encode
from simulator.learned.registry import Registry
from simulator.learned.train import KINDS, TrainConfig, evaluate
from simulator.learned.versions import train_version
from simulator.metrics import RankingMetrics, ranking_metrics

EVAL_KINDS: tuple[str, ...] = ("analytical", *KINDS)


def fitted_params(train: Domain) -> CostParams:
    """φ, δ and efficiency of Eqs. 1-3 fitted by least squares on ``train``'s measured times."""
    samples = [
        FitSample(train.model, train.cluster, s, float(t))
        for s, t in zip(train.strategies, train.times, strict=True)
    ]
    return fit_analytical(samples).params


def analytical_metrics(train: Domain, test: Domain, fitted: bool = True) -> RankingMetrics:
    """The analytical model on ``test``, its constants fitted on ``train`` when ``fitted``."""
    sim = AnalyticalSimulator()
    if fitted and len(train):
        sim = AnalyticalSimulator(fitted_params(train))
    pred = sim.predict(test.model, test.cluster, list(test.strategies))
    return ranking_metrics(pred, test.times)


def _finite(m: RankingMetrics) -> dict[str, float | None]:
    return {k: (v if np.isfinite(v) else None) for k, v in m.as_dict().items()}


def eval_report(
    domains: Sequence[Domain],
    registry: Registry,
    *,
    split_seed: int = 0,
    train_missing: bool = True,
    config: TrainConfig | None = None,
) -> dict[str, Any]:
    """``{"domains": {domain: {kind: {"pairwise_accuracy", "kendall_tau", "top5_regret"}}}}``.

    A kind with no saved version (and ``train_missing`` off) is left out of its domain.
    """
    config = config or TrainConfig()
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for domain in domains:
        train, _, test = domain.split(split_seed)
        row = {"analytical": _finite(analytical_metrics(train, test))}
        for kind in KINDS:
            info = registry.latest(domain.name, kind=kind)
            if info is None and train_missing:
                cfg = TrainConfig(**{**config.__dict__, "kind": kind})
                info = train_version([domain], registry, cfg, split_seed=split_seed)
            if info is None:
                continue
            _, _, own_test = domain.split(int(info.config.get("split_seed", 0)))
            row[kind] = _finite(evaluate(registry.load(info.version), encode(own_test)))
        out[domain.name] = row
    return {"domains": out}
