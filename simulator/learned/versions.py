"""Train a new simulator version from measured domains, and load one: what the service calls.

``train_version`` splits every domain 70/15/15 by a seeded hash of each strategy (the split of a
strategy never changes as records arrive), fits on the train splits, selects the epoch on the
validation splits, measures the test splits, and saves weights and metadata in the registry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from simulator.learned.data import Domain, EncodedDomain, encode
from simulator.learned.linear import LinearRanker
from simulator.learned.registry import LearnedSimulator, Registry, VersionInfo, domain_record
from simulator.learned.simulator import NeuralSimulator
from simulator.learned.train import TrainConfig, evaluate, fit
from simulator.learned.transfer import TransferEnsemble


def _clean(metrics: dict[str, float]) -> dict[str, float | None]:
    return {k: (None if math.isnan(v) else v) for k, v in metrics.items()}


def split_metrics(sim: LearnedSimulator, splits: dict[str, EncodedDomain]) -> dict[str, dict[str, Any]]:
    """{split name: ranking metrics} for every split with at least two points."""
    return {name: _clean(evaluate(sim, d).as_dict()) for name, d in splits.items() if len(d) >= 2}


def train_version(
    domains: Sequence[Domain],
    registry: Registry,
    config: TrainConfig | None = None,
    *,
    split_seed: int = 0,
    base: str | None = None,
    notes: dict[str, Any] | None = None,
) -> VersionInfo:
    """Train one simulator on ``domains`` (measured runtimes only) and save it as a new version.

    ``base`` names a saved version to start from (fine-tuning a transferred simulator on the new
    domains' few points); its kind wins over ``config.kind``. Returns the new version's metadata,
    whose ``metrics`` hold validation and test metrics per domain.
    """
    config = config or TrainConfig()
    if not domains:
        raise ValueError("domains: at least one domain is needed")
    parts = {d.name: d.split(split_seed) for d in domains}
    enc = {name: tuple(encode(p) for p in split) for name, split in parts.items()}
    train = [e[0] for e in enc.values()]
    val = [e[1] for e in enc.values()]
    if base is not None:
        start = registry.load(base)
        if isinstance(start, TransferEnsemble):
            raise ValueError(
                f"base: {base} is a transfer ensemble; fine-tune it with simulator.learned.pretrained"
            )
        cfg = TrainConfig(**{**config.__dict__, "kind": start.name})
        if isinstance(start, LinearRanker):
            # A logistic fit has no warm start: refitting on the given domains is the update.
            sim: LearnedSimulator = fit(train, val, cfg).simulator
        else:
            assert isinstance(start, NeuralSimulator)
            cfg = TrainConfig(**{**cfg.__dict__, "loss": start.loss})
            sim = fit(train, val, cfg, start=start).simulator
        config = cfg
    else:
        sim = fit(train, val, config).simulator
    metrics = {
        name: split_metrics(sim, {"train": e[0], "val": e[1], "test": e[2]}) for name, e in enc.items()
    }
    records = [
        domain_record(d, train=len(parts[d.name][0]), val=len(parts[d.name][1]), test=len(parts[d.name][2]))
        for d in domains
    ]
    return registry.save(
        sim,
        config={**config.as_dict(), "split_seed": split_seed, "base": base},
        domains=records,
        metrics=metrics,
        notes=notes,
    )


def load(version: str, registry: Registry) -> LearnedSimulator:
    """The simulator saved as ``version`` (a ``simulator.base.Simulator``)."""
    return registry.load(version)
