"""`strategist search create --compression`: lossless by default, lossy only when asked, bad values exit 2."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from service.cli import app


def test_default_is_lossless_and_opt_in_is_sent(sent: list[dict[str, Any]]) -> None:
    base = ["search", "create", "--model", "NCF-dense", "--cluster", "B9", "--token", "t"]
    assert CliRunner().invoke(app, base).exit_code == 0
    r = CliRunner().invoke(app, [*base, "--compression", "powersgd"])
    assert r.exit_code == 0 and r.output.strip() == "7"
    assert [b["compression"] for b in sent] == ["none", "powersgd"]


def test_unknown_compression_is_one_line_exit_2(sent: list[dict[str, Any]]) -> None:
    r = CliRunner().invoke(app, ["search", "create", "--model", "m", "--cluster", "c", "--token", "t",
                                 "--compression", "int8"])  # fmt: skip
    assert r.exit_code == 2 and "--compression" in r.output and "int8" in r.output
    assert sent == []


def _kinds(output: str) -> set[str]:
    strategies = json.loads(output)
    return {
        sh.get("compressor", {}).get("kind", "none")
        for s in strategies
        for v in s["variables"]
        for sh in v["shards"]
        if sh["kind"] == "collective"
    }


def test_sample_is_lossless_unless_asked() -> None:
    base = ["sample", "--model", "BERT-3L", "--cluster", "B5", "-n", "20", "--seed", "1", "--json"]
    assert _kinds(CliRunner().invoke(app, base).stdout) == {"none"}
    assert _kinds(CliRunner().invoke(app, [*base, "--compression", "powersgd"]).stdout) == {
        "none",
        "powersgd",
    }
    r = CliRunner().invoke(app, [*base, "--compression", "bogus"])
    assert r.exit_code == 2 and r.output.strip().startswith("error: --compression:")
