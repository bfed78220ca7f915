"""Measured runtimes grouped by domain, the stable train/val/test split, and encoded tensors.

A *domain* is one (model, cluster) pair, named ``"<model>__<cluster>"``. Its samples are
distinct strategies with their measured iteration time (the median over the trial's iterations;
repeated trials of one strategy are merged by their median). The split assigns each strategy by
a seeded hash of its canonical JSON, so the split of a strategy never changes when more records
arrive and a re-measured strategy never lands on both sides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from simulator.learned.features import FeatureExtractor, StrategyGraph
from simulator.spec import ClusterSpec, ModelSpec, Strategy, domain_name, strategy_key

#: Fractions of (train, validation); the rest is test (AutoSync §10: 70/15/15).
SPLIT = (0.70, 0.15)


@dataclass(frozen=True)
class SourceFile:
    """A data file a domain was read from (recorded in checkpoint metadata)."""

    path: str
    records: int
    sha256: str


@dataclass(frozen=True)
class Domain:
    """Measured strategies of one model on one cluster.

    ``times[i]`` is the measured seconds per iteration of ``strategies[i]``; ``keys[i]`` is its
    ``strategy_key``. The service builds a Domain from its own trials; ``runtimes.load_domain``
    builds one from ``datasets/runtimes``.
    """

    model: ModelSpec
    cluster: ClusterSpec
    strategies: tuple[Strategy, ...]
    times: np.ndarray
    keys: tuple[str, ...]
    sources: tuple[SourceFile, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", domain_name(self.model.name, self.cluster.name))
        t = np.asarray(self.times, dtype=np.float64)
        object.__setattr__(self, "times", t)
        if not (len(self.strategies) == len(t) == len(self.keys)):
            raise ValueError(
                f"domain {self.name}: {len(self.strategies)} strategies, {len(t)} times, "
                f"{len(self.keys)} keys"
            )
        if len(t) and not (np.isfinite(t).all() and (t > 0).all()):
            raise ValueError(f"domain {self.name}: times must be finite and > 0")

    @classmethod
    def from_measurements(
        cls,
        model: ModelSpec,
        cluster: ClusterSpec,
        samples: Sequence[tuple[Strategy, float]],
        sources: tuple[SourceFile, ...] = (),
    ) -> Domain:
        """Merge (strategy, seconds) samples: one entry per distinct strategy, median time."""
        by_key: dict[str, tuple[Strategy, list[float]]] = {}
        for strategy, seconds in samples:
            key = strategy_key(strategy)
            by_key.setdefault(key, (strategy, []))[1].append(float(seconds))
        keys = tuple(sorted(by_key))
        return cls(
            model=model,
            cluster=cluster,
            strategies=tuple(by_key[k][0] for k in keys),
            times=np.array([float(np.median(by_key[k][1])) for k in keys]),
            keys=keys,
            sources=sources,
        )

    def __len__(self) -> int:
        return len(self.strategies)

    def subset(self, index: Sequence[int] | np.ndarray) -> Domain:
        idx = [int(i) for i in index]
        return Domain(
            model=self.model,
            cluster=self.cluster,
            strategies=tuple(self.strategies[i] for i in idx),
            times=self.times[idx],
            keys=tuple(self.keys[i] for i in idx),
            sources=self.sources,
            name=self.name,
        )

    def split(self, seed: int) -> tuple[Domain, Domain, Domain]:
        """(train, validation, test) at 70/15/15 by a seeded hash of each strategy key."""
        u = self._units(seed)
        train = np.nonzero(u < SPLIT[0])[0]
        val = np.nonzero((u >= SPLIT[0]) & (u < SPLIT[0] + SPLIT[1]))[0]
        test = np.nonzero(u >= SPLIT[0] + SPLIT[1])[0]
        return self.subset(train), self.subset(val), self.subset(test)

    def held_out_positions(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``split(seed)``'s train split and of the other 30 % (validation + test)."""
        u = self._units(seed)
        return np.nonzero(u < SPLIT[0])[0], np.nonzero(u >= SPLIT[0])[0]

    def _units(self, seed: int) -> np.ndarray:
        return np.array([_unit(f"{seed}:{k}") for k in self.keys])


def _unit(text: str) -> float:
    """A uniform number in [0, 1) from a string (stable across runs and machines)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) / float(16**12)


@dataclass
class EncodedDomain:
    """A domain's strategies turned into feature graphs once, reused by every epoch."""

    name: str
    graphs: list[StrategyGraph]
    times: np.ndarray
    log_times: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.log_times = np.log(self.times)

    def __len__(self) -> int:
        return len(self.graphs)

    def subset(self, index: Sequence[int] | np.ndarray) -> EncodedDomain:
        idx = [int(i) for i in index]
        return EncodedDomain(self.name, [self.graphs[i] for i in idx], self.times[idx])


def encode(domain: Domain, extractor: FeatureExtractor | None = None) -> EncodedDomain:
    """Feature graphs of every strategy of ``domain`` (computed once)."""
    fx = extractor or FeatureExtractor(domain.model, domain.cluster)
    return EncodedDomain(domain.name, fx.many(domain.strategies), domain.times)
