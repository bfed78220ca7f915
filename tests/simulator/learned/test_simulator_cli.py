"""`strategist simulator train|eval|list` on a tiny runtime-record folder (synthetic labels)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from service.cli import app
from simulator.learned.data import Domain
from simulator.learned.runtimes import load_runtimes
from simulator.spec import dump_json

runner = CliRunner()


@pytest.fixture()
def datasets(tmp_path: Path, domain: Domain, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A datasets folder: the toy model and cluster specs and runtime records in the collect format."""
    root = tmp_path / "datasets"
    (root / "models").mkdir(parents=True)
    (root / "clusters").mkdir()
    (root / "models" / "toy.json").write_text(dump_json(domain.model))
    (root / "clusters" / "duo.json").write_text(dump_json(domain.cluster))
    folder = root / "runtimes" / "toy__duo"
    folder.mkdir(parents=True)
    lines = []
    for s, t in zip(domain.strategies, domain.times, strict=True):
        rec = {"format": "strategist.runtime/1", "model": "toy", "cluster": "duo", "ok": True,
               "median_s": float(t), "failure": None, "strategy": s.model_dump(mode="json")}  # fmt: skip
        lines.append(json.dumps(rec))
    failed = {"format": "strategist.runtime/1", "model": "toy", "cluster": "duo", "ok": False,
              "median_s": None, "failure": "oom", "strategy": domain.strategies[0].model_dump(mode="json")}  # fmt: skip
    (folder / "a.jsonl").write_text("\n".join([*lines, json.dumps(failed)]) + "\n")
    monkeypatch.setenv("STRATEGIST_DATASETS", str(root))
    return root


def test_loader_reads_the_record_format(datasets: Path, domain: Domain) -> None:
    [loaded] = load_runtimes(datasets / "runtimes")
    assert loaded.name == "toy__duo" and len(loaded) == len(domain)
    assert loaded.keys == domain.keys
    assert loaded.sources[0].records == len(domain) + 1 and len(loaded.sources[0].sha256) == 64


def test_the_loader_leaves_a_drift_reference_out(datasets: Path, domain: Domain) -> None:
    # A drift reference re-measures strategy 0 at 1,000 s: not a trial, so its time is not merged.
    ref = {"format": "strategist.runtime/2", "model": "toy", "cluster": "duo", "ok": True, "median_s": 1e3,
           "failure": None, "reference": True, "strategy": domain.strategies[0].model_dump(mode="json")}  # fmt: skip
    with (datasets / "runtimes" / "toy__duo" / "a.jsonl").open("a") as f:
        f.write(json.dumps(ref) + "\n")
    [loaded] = load_runtimes(datasets / "runtimes")
    assert loaded.keys == domain.keys and np.allclose(loaded.times, domain.times)


def test_train_then_eval_json(datasets: Path, tmp_path: Path) -> None:
    reg = str(tmp_path / "sims")
    args = ["--runtimes-dir", str(datasets / "runtimes"), "--registry-dir", reg]
    r = runner.invoke(
        app, ["simulator", "train", "--domain", "toy__duo", "--kind", "gat", "--epochs", "2", *args]
    )
    assert r.exit_code == 0, r.output
    assert "saved gat-" in r.output
    r = runner.invoke(app, ["simulator", "eval", "--json", "--epochs", "2", *args])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert set(report) == {"domains"} and set(report["domains"]) == {"toy__duo"}
    kinds = report["domains"]["toy__duo"]
    assert set(kinds) == {"analytical", "linear", "rnn", "gat"}
    for m in kinds.values():
        assert set(m) == {"pairwise_accuracy", "kendall_tau", "top5_regret"}
        assert 0.0 <= m["pairwise_accuracy"] <= 1.0
    r = runner.invoke(app, ["simulator", "list", "--json", "--registry-dir", reg])
    assert r.exit_code == 0 and {v["kind"] for v in json.loads(r.output)} == {"linear", "rnn", "gat"}


def test_bad_options_exit_2(datasets: Path, tmp_path: Path) -> None:
    args = ["--runtimes-dir", str(datasets / "runtimes"), "--registry-dir", str(tmp_path / "s")]
    r = runner.invoke(app, ["simulator", "train", "--domain", "nope__x", *args])
    assert r.exit_code == 2 and "--domain" in r.output and "toy__duo" in r.output
    r = runner.invoke(app, ["simulator", "train", "--all", "--kind", "mlp", *args])
    assert r.exit_code == 2 and "--kind" in r.output
    r = runner.invoke(app, ["simulator", "train", *args])
    assert r.exit_code == 2 and "--all" in r.output


def test_reference_times_read_the_drift_references_in_file_order(tmp_path: Path) -> None:
    from simulator.spec.records import load_trials, reference_times

    recs = [{"ok": True, "median_s": 0.2, "reference": True}, {"ok": True, "median_s": 0.5},
            {"ok": False, "median_s": None, "reference": True}, {"ok": True, "median_s": 0.3, "reference": True}]  # fmt: skip
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert reference_times(path) == [0.2, 0.3]  # the failed one left out
    assert [r["median_s"] for r in load_trials(path)] == [0.5]
