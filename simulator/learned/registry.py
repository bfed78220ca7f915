"""Versioned simulator checkpoints on disk: weights (torch.save) + JSON metadata per version.

Layout: ``<root>/<version>/weights.pt`` and ``<root>/<version>/meta.json``. A version directory
is written under a temporary name and renamed into place, so a reader never sees half a version;
a saved version is never modified. Several processes may save at once (names are unique).
The root defaults to ``~/.cache/strategist/simulators``; the service passes its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simulator.learned.blend import KIND as BLEND_KIND
from simulator.learned.blend import BlendEnsemble
from simulator.learned.data import Domain
from simulator.learned.features import FEATURE_SCHEMA_VERSION
from simulator.learned.linear import LinearRanker
from simulator.learned.residual import KIND as RESIDUAL_KIND
from simulator.learned.residual import ResidualEnsemble
from simulator.learned.simulator import NeuralSimulator
from simulator.learned.train import LearnedSimulator, make_net
from simulator.learned.transfer import KIND as TRANSFER_KIND
from simulator.learned.transfer import TransferEnsemble

DEFAULT_ROOT = Path("~/.cache/strategist/simulators")


@dataclass(frozen=True)
class VersionInfo:
    """What one saved simulator version is: its kind, the data it saw, its metrics, when.

    ``domains``: one entry per training domain: name, records (distinct strategies), split
    sizes, data_sha256 (of its strategy keys and times) and the source files with record counts
    and sha256. ``metrics``: {domain: {split: {"pairwise_accuracy", "kendall_tau", "top5_regret"}}}.
    """

    version: str
    kind: str
    loss: str
    created_at: str
    feature_schema: int
    domains: list[dict[str, Any]]
    metrics: dict[str, dict[str, dict[str, float]]]
    config: dict[str, Any]
    hidden: int = 32
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def domain_names(self) -> list[str]:
        return [d["name"] for d in self.domains]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def domain_record(domain: Domain, **split_sizes: int) -> dict[str, Any]:
    """The metadata entry of one training domain."""
    h = hashlib.sha256()
    for key, t in zip(domain.keys, domain.times, strict=True):
        h.update(f"{key}:{t:.9g};".encode())
    return {
        "name": domain.name,
        "records": len(domain),
        "data_sha256": h.hexdigest(),
        "files": [asdict(s) for s in domain.sources],
        **split_sizes,
    }


class Registry:
    """Saves, lists and loads simulator versions under one directory (see the module docstring)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root if root is not None else DEFAULT_ROOT).expanduser()

    def save(
        self,
        sim: LearnedSimulator,
        *,
        config: dict[str, Any],
        domains: list[dict[str, Any]],
        metrics: dict[str, dict[str, dict[str, float]]],
        notes: dict[str, Any] | None = None,
    ) -> VersionInfo:
        """Write a new version and return its metadata."""
        now = datetime.now(UTC)
        kind = sim.name
        version = f"{kind}-{now.strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:6]}"
        info = VersionInfo(
            version=version,
            kind=kind,
            loss=sim.loss if isinstance(sim, NeuralSimulator) else "rank",
            created_at=now.isoformat(),
            feature_schema=FEATURE_SCHEMA_VERSION,
            domains=domains,
            metrics=metrics,
            config=config,
            hidden=sim.net.hidden_dim if isinstance(sim, NeuralSimulator) else 0,
            notes=notes or {},
        )
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{version}"
        tmp.mkdir()
        if isinstance(sim, NeuralSimulator):
            state = sim.net.state_dict()
        else:
            state = {k: torch.from_numpy(np.asarray(v)) for k, v in sim.state().items()}
        torch.save(state, tmp / "weights.pt")
        (tmp / "meta.json").write_text(json.dumps(info.as_dict(), indent=2, default=_json_default))
        os.replace(tmp, self.root / version)
        return info

    def info(self, version: str) -> VersionInfo:
        path = self.root / version / "meta.json"
        if not path.is_file():
            raise KeyError(f"unknown simulator version {version!r} in {self.root}")
        return VersionInfo(**json.loads(path.read_text()))

    def list(self, domain: str | None = None, kind: str | None = None) -> list[VersionInfo]:
        """Versions, oldest first; only those trained on ``domain`` / of ``kind`` when given."""
        if not self.root.is_dir():
            return []
        out = []
        for meta in self.root.glob("*/meta.json"):
            info = VersionInfo(**json.loads(meta.read_text()))
            if domain is not None and domain not in info.domain_names:
                continue
            if kind is not None and info.kind != kind:
                continue
            out.append(info)
        return sorted(out, key=lambda i: (i.created_at, i.version))

    def latest(self, domain: str | None = None, kind: str | None = None) -> VersionInfo | None:
        """The newest version trained on ``domain`` (and of ``kind``), or None."""
        versions = self.list(domain=domain, kind=kind)
        return versions[-1] if versions else None

    def load(self, version: str) -> LearnedSimulator:
        """The simulator of ``version``, ready for inference."""
        info = self.info(version)
        if info.feature_schema != FEATURE_SCHEMA_VERSION:
            raise ValueError(
                f"version {version}: feature_schema is {info.feature_schema}, this code computes "
                f"schema {FEATURE_SCHEMA_VERSION}; retrain it"
            )
        state = torch.load(self.root / version / "weights.pt", weights_only=True)
        if info.kind == "linear":
            return LinearRanker(state["coef"].numpy(), state["mean"].numpy(), state["std"].numpy())
        if info.kind == TRANSFER_KIND:
            return TransferEnsemble(state["coef"].numpy(), state["mean"].numpy(), state["std"].numpy())
        if info.kind == RESIDUAL_KIND:
            return ResidualEnsemble.from_state({k: v.numpy() for k, v in state.items()})
        if info.kind == BLEND_KIND:
            return BlendEnsemble.from_state({k: v.numpy() for k, v in state.items()})
        net = make_net(info.kind, info.hidden)
        net.load_state_dict(state)
        return NeuralSimulator(net, info.loss)


def _json_default(obj: object) -> object:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
