"""`strategist sample` and `strategist select` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from simulator.spec import ClusterSpec, ModelSpec, Strategy, dump_json

runner = CliRunner()


@pytest.fixture
def files(tmp_path: Path, model: ModelSpec, cluster: ClusterSpec) -> tuple[str, str]:
    m, c = tmp_path / "toy.json", tmp_path / "uneven.json"
    m.write_text(dump_json(model))
    c.write_text(dump_json(cluster))
    return str(m), str(c)


def test_sample_json_is_valid_and_seeded(
    files: tuple[str, str], model: ModelSpec, cluster: ClusterSpec
) -> None:
    args = ["sample", "--model", files[0], "--cluster", files[1], "-n", "4", "--seed", "3", "--json"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    strategies = [Strategy.model_validate(x) for x in json.loads(first.stdout)]
    assert len(strategies) == 4
    for s in strategies:
        s.check(model, cluster)
    assert runner.invoke(app, args).stdout == first.stdout
    other = runner.invoke(app, [*args[:-3], "4", "--json"])
    assert other.stdout != first.stdout


def test_sample_no_constraints_differs(files: tuple[str, str]) -> None:
    base = ["sample", "--model", files[0], "--cluster", files[1], "-n", "3", "--json"]
    constrained = runner.invoke(app, base).stdout
    free = runner.invoke(app, [*base, "--no-constraints"])
    assert free.exit_code == 0 and free.stdout != constrained


def test_select_json(files: tuple[str, str], model: ModelSpec, cluster: ClusterSpec) -> None:
    args = ["select", "--model", files[0], "--cluster", files[1], "-n", "12", "-k", "3", "--alpha", "0.5"]
    result = runner.invoke(app, [*args, "--seed", "1", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["k"] == 3 and out["candidates"] == 12 and out["alpha"] == 0.5
    assert len(out["chosen"]) == 3 and len({c["candidate"] for c in out["chosen"]}) == 3
    sim = out["pairwise_similarity"]
    assert len(sim) == 3 and all(len(row) == 3 and row[i] == 1.0 for i, row in enumerate(sim))
    for c in out["chosen"]:
        Strategy.model_validate(c["strategy"]).check(model, cluster)
        assert c["predicted_time_s"] > 0
    table = runner.invoke(app, [*args, "--seed", "1"])
    assert table.exit_code == 0 and "predicted ms" in table.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-k", "5", "-n", "2"], "-k: 5 is more than the 2 candidates"),
        (["--similarity", "nope"], "--similarity: unknown 'nope'"),
    ],
)
def test_select_errors(files: tuple[str, str], extra: list[str], message: str) -> None:
    result = runner.invoke(app, ["select", "--model", files[0], "--cluster", files[1], *extra])
    assert result.exit_code == 2 and message in result.stderr


def test_unknown_model(files: tuple[str, str]) -> None:
    result = runner.invoke(app, ["sample", "--model", "no-such-model", "--cluster", files[1]])
    assert result.exit_code == 2 and "unknown zoo model 'no-such-model'" in result.stderr
