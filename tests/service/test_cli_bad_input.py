"""Every command that reads a spec file answers a bad one with one line and exit 2, never a traceback
(issue 20: a non-UTF-8 file, shape [2**70], the 10**12-GPU cluster, NaN, absurd nesting)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from service.cli import app
from simulator import zoo
from simulator.analytical import baseline
from simulator.spec import dump_json

runner = CliRunner()


def _model() -> dict[str, Any]:
    return json.loads(dump_json(zoo.model("NCF-dense")))


def _cluster() -> dict[str, Any]:
    return json.loads(dump_json(zoo.cluster("B1")))


def _bad_files(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, the words its error must contain)."""
    files: dict[str, tuple[Path, str]] = {}

    def put(name: str, text: str | bytes, words: str, kind: str) -> None:
        path = tmp / f"{name}.{kind}.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        files[name] = (path, words)

    model = _model()
    put("latin1-model", json.dumps(model).replace("NCF", "NCF\u00e9").encode("latin-1"), "not UTF-8", "model")
    huge = _model()
    huge["layers"][0]["variables"][0]["shape"] = [2**70]
    del huge["layers"][0]["variables"][0]["bytes"]  # (derived; a stale one would be the first error)
    put("shape-2-70", json.dumps(huge), "layers.0.variables.0.shape", "model")
    nan = _model()
    nan["layers"][1]["fwd_flops"] = float("nan")
    put("nan-flops", json.dumps(nan), "layers.1.fwd_flops", "model")
    poison = _cluster()
    poison["nodes"][0]["gpus"] = 10**12
    put("poison-cluster", json.dumps(poison), "nodes.0.gpus", "cluster")
    put("deep", "[" * 50_000 + "]" * 50_000, "nested too deeply", "model")
    put("not-json", "{nope", "not valid JSON", "model")
    return files


def _one_line_exit_2(args: list[str], words: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (args, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert words in lines[0], lines[0]
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    "name", ["latin1-model", "shape-2-70", "nan-flops", "poison-cluster", "deep", "not-json"]
)
def test_validate_answers_every_bad_file_in_one_line(tmp_path: Path, name: str) -> None:
    path, words = _bad_files(tmp_path)[name]
    _one_line_exit_2(["validate", str(path)], words)


@pytest.mark.parametrize("name", ["latin1-model", "shape-2-70", "nan-flops", "deep"])
def test_commands_taking_a_model_file(tmp_path: Path, name: str) -> None:
    path, words = _bad_files(tmp_path)[name]
    _one_line_exit_2(["cost", "--model", str(path), "--cluster", "B1", "--strategy", "horovod"], words)
    _one_line_exit_2(["sample", "--model", str(path), "--cluster", "B1", "-n", "2", "--json"], words)
    _one_line_exit_2(["select", "--model", str(path), "--cluster", "B1", "-n", "4", "-k", "2"], words)


def test_the_poison_cluster_is_refused_not_costed(tmp_path: Path) -> None:
    path, words = _bad_files(tmp_path)["poison-cluster"]
    _one_line_exit_2(["cost", "--model", "NCF-dense", "--cluster", str(path), "--strategy", "horovod"], words)
    _one_line_exit_2(["sample", "--model", "NCF-dense", "--cluster", str(path), "-n", "2"], words)


def test_a_bad_strategy_file_is_one_line(tmp_path: Path) -> None:
    s = json.loads(dump_json(baseline("horovod", zoo.model("NCF-dense"), zoo.cluster("B1"))))
    s["variables"][0]["shards"][0]["group"] = 2**63
    path = tmp_path / "s.json"
    path.write_text(json.dumps(s))
    _one_line_exit_2(
        ["cost", "--model", "NCF-dense", "--cluster", "B1", "--strategy", str(path)],
        "variables.0.shards.0.group",
    )
    _one_line_exit_2(["validate", str(path), "--model", "NCF-dense", "--cluster", "B1"], "group")
    latin1 = tmp_path / "s1.json"
    latin1.write_bytes(b'{"kind": "strategy", "name": "\xe9"}')
    _one_line_exit_2(
        ["cost", "--model", "NCF-dense", "--cluster", "B1", "--strategy", str(latin1)], "not UTF-8"
    )


def test_zoo_names_in_any_case_on_the_command_line() -> None:
    res = runner.invoke(
        app, ["cost", "--model", "ncf-DENSE", "--cluster", "b1", "--strategy", "ps", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"] == "NCF-dense"


@pytest.mark.parametrize("name", ["a\x00b", "tab\there", "x" * 201])
def test_token_create_refuses_a_bad_name_before_the_database(name: str, tmp_path: Path) -> None:
    res = runner.invoke(
        app,
        ["token", "create", "--role", "user", "--name", name],
        env={
            "STRATEGIST_DATA_DIR": str(tmp_path),
            "STRATEGIST_DATABASE_URL": "postgresql+psycopg://nowhere:1/x",
        },
    )
    assert res.exit_code == 2 and res.stderr.startswith("error: --name: "), res.output


@pytest.mark.parametrize(
    "args",
    [
        ["sample", "--model", "NCF-dense", "--cluster", "B1", "--seed", "-1"],
        ["sample", "--model", "NCF-dense", "--cluster", "B1", "-n", str(10**9)],
        ["select", "--model", "NCF-dense", "--cluster", "B1", "-n", "8", "-k", str(10**6)],
        ["cost", "--model", "NCF-dense", "--cluster", "B1", "--strategy", "ps", "--seed", str(2**64)],
    ],
)
def test_counts_and_seeds_out_of_range_are_usage_errors(args: list[str]) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "Invalid value" in res.stderr, res.output
