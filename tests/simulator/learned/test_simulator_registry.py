"""Simulator versions: save → list/latest → load gives the same predictions and metadata."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.learned.data import Domain
from simulator.learned.features import FEATURE_SCHEMA_VERSION
from simulator.learned.registry import Registry
from simulator.learned.train import TrainConfig
from simulator.learned.versions import load, train_version
from simulator.spec import ClusterSpec, ModelSpec


@pytest.mark.parametrize("kind", ["rnn", "gat", "linear"])
def test_round_trip(
    tmp_path: Path, domain: Domain, model: ModelSpec, cluster: ClusterSpec, kind: str
) -> None:
    reg = Registry(tmp_path / "sims")
    info = train_version([domain], reg, TrainConfig(kind=kind, epochs=2, hidden=8), split_seed=1)  # type: ignore[arg-type]
    assert info.kind == kind and info.feature_schema == FEATURE_SCHEMA_VERSION
    assert info.domains[0]["name"] == domain.name == "toy__duo"
    d = info.domains[0]
    assert d["records"] == len(domain) == d["train"] + d["val"] + d["test"]
    assert set(info.metrics[domain.name]) == {"train", "val", "test"}
    assert set(info.metrics[domain.name]["test"]) == {"pairwise_accuracy", "kendall_tau", "top5_regret"}
    assert info.config["split_seed"] == 1 and info.config["kind"] == kind
    meta = json.loads((tmp_path / "sims" / info.version / "meta.json").read_text())
    assert meta["version"] == info.version and meta["created_at"]
    sim = load(info.version, reg)
    strategies = list(domain.strategies[:5])
    again = load(info.version, reg)
    np.testing.assert_allclose(
        sim.predict(model, cluster, strategies), again.predict(model, cluster, strategies)
    )
    assert reg.latest(domain.name) == info
    assert reg.latest(domain.name, kind=kind) == info
    assert reg.latest("other__domain") is None


def test_latest_is_newest_and_fine_tune_from_base(tmp_path: Path, domain: Domain) -> None:
    reg = Registry(tmp_path)
    cfg = TrainConfig(kind="gat", epochs=1, hidden=8)
    first = train_version([domain], reg, cfg)
    second = train_version([domain], reg, cfg, base=first.version)
    assert [v.version for v in reg.list()] == [first.version, second.version]
    assert reg.latest(domain.name) == second and second.config["base"] == first.version
    with pytest.raises(KeyError, match="unknown simulator version"):
        reg.load("nope")


def test_schema_mismatch_is_refused(tmp_path: Path, domain: Domain) -> None:
    reg = Registry(tmp_path)
    info = train_version([domain], reg, TrainConfig(kind="linear"))
    path = tmp_path / info.version / "meta.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, "feature_schema": FEATURE_SCHEMA_VERSION + 1}))
    with pytest.raises(ValueError, match="feature_schema"):
        reg.load(info.version)
