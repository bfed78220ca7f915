"""Pre-training on labels made by the analytical model (AutoSync Eqs. 1-3), kept apart from data.

Issue 6's rule: analytical labels may be used for pre-training, clearly named as such, and never
reported as accuracy. So:

- ``analytical_labelled`` turns strategies the caller drew (a sampler's, never the test split's)
  into an ``EncodedDomain`` named ``"analytical-labels:<domain>"`` whose times are Eq. 1-3
  predictions, with the constants (φ, δ, efficiency) the caller passes, typically fitted on the
  domain's measured *train* split.
- ``pretrain_then_fit`` first trains the network on those sets (fixed epochs, no model
  selection, the caller's loss on analytical labels), then trains it on the measured train split
  with the full recipe, selecting the epoch on the measured validation split. Everything a
  caller reports afterwards is measured on measured runtimes only.

Decision: the measured phase keeps the pre-trained network's feature normalisation (it was
fitted on many more strategies, drawn from the same space) and its full learning-rate schedule;
pre-training only sets the starting point. ``simulator`` does not import ``search`` (layering),
so the strategies are drawn by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from simulator.analytical import AnalyticalSimulator, CostParams
from simulator.learned.data import EncodedDomain
from simulator.learned.features import FeatureExtractor
from simulator.learned.simulator import NeuralSimulator
from simulator.learned.train import FitResult, TrainConfig, fit
from simulator.spec import ClusterSpec, ModelSpec, Strategy, domain_name

#: Prefix of every pre-training set's name, so no report can mistake it for measured data.
LABEL_PREFIX = "analytical-labels:"


def analytical_labelled(
    model: ModelSpec,
    cluster: ClusterSpec,
    strategies: Sequence[Strategy],
    params: CostParams | None = None,
) -> EncodedDomain:
    """``strategies`` with Eq. 1-3 iteration times as labels (named ``analytical-labels:<domain>``)."""
    if not strategies:
        raise ValueError("strategies: need at least one strategy to label")
    times = AnalyticalSimulator(params).predict(model, cluster, list(strategies))
    # Features with the default constants, exactly as measured strategies are encoded.
    graphs = FeatureExtractor(model, cluster).many(list(strategies))
    return EncodedDomain(LABEL_PREFIX + domain_name(model.name, cluster.name), graphs, times)


def pretrain(labelled: Sequence[EncodedDomain], config: TrainConfig, epochs: int) -> NeuralSimulator:
    """A network trained ``epochs`` epochs on analytical labels only (no selection)."""
    for d in labelled:
        if not d.name.startswith(LABEL_PREFIX):
            raise ValueError(f"labelled: {d.name!r} is not an analytical-label set ({LABEL_PREFIX}*)")
    if config.kind == "linear":
        raise ValueError("kind: the linear ranker has no warm start to pre-train")
    cfg = replace(config, epochs=epochs, milestones=(), eval_every=max(1, epochs))
    sim = fit(labelled, [], cfg).simulator
    assert isinstance(sim, NeuralSimulator)
    return sim


def pretrain_then_fit(
    train: Sequence[EncodedDomain],
    val: Sequence[EncodedDomain],
    labelled: Sequence[EncodedDomain],
    config: TrainConfig,
    pretrain_epochs: int = 20,
) -> FitResult:
    """Pre-train on ``labelled`` (analytical labels), then fit on measured ``train``/``val``."""
    start = pretrain(labelled, config, pretrain_epochs)
    return fit(train, val, config, start=start)
