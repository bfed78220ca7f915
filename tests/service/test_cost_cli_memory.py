"""`strategist cost` (issue 43): memory per GPU with its parts and a does-not-fit verdict naming why,
and T's parts that add up (T = max(T_comp, E), E the overlapped synchronisation's end)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator.spec import load_spec

DATASETS = Path(__file__).resolve().parents[2] / "datasets"


@pytest.fixture
def t4_cluster(tmp_path: Path) -> Path:
    """The two g4dn.12xlarge nodes (4x T4 16 GB each) of the zoo's A100x8+T4x8, alone."""
    d: dict[str, Any] = json.loads((DATASETS / "clusters" / "A100x8+T4x8.json").read_text())
    d["name"] = "T4x8"
    d["device_types"] = [t for t in d["device_types"] if t["name"] == "T4-16GB"]
    d["nodes"] = [n for n in d["nodes"] if n["device"] == "T4-16GB"]
    path = tmp_path / "t4x8.json"
    path.write_text(json.dumps(d))
    load_spec(path)  # valid
    return path


def cost(*args: str) -> Any:
    from service.cli import app

    return CliRunner().invoke(app, ["cost", *args])


def test_gpt_2_7b_on_16gb_t4s_does_not_fit_and_says_why(t4_cluster: Path) -> None:
    args = ["--model", "GPT-2.7B", "--cluster", str(t4_cluster), "--strategy", "allreduce-single"]
    res = cost(*args, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    mem = out["memory"]
    assert mem["fits"] is False
    assert mem["device_capacity"] == pytest.approx(0.9 * 16e9)  # 90 % of the T4's 16 GB usable
    assert sum(mem["parts"].values()) == pytest.approx(mem["device_bytes"])  # the parts add up
    # Adam: two moments of every all-reduced parameter byte
    assert mem["parts"]["optimizer state"] == pytest.approx(2 * mem["parts"]["parameters"])
    assert mem["device_bytes"] > mem["device_capacity"]
    assert out["t_iter"] == pytest.approx(max(out["t_comp"], out["t_sync_end"]))
    table = cost(*args)
    assert table.exit_code == 0, table.output
    text = " ".join(table.output.split())
    assert "does not fit: device memory:" in text and "usable on T4-16GB" in text
    assert "T = max(T_comp, E)" in text and "optimizer state" in text


def test_a_small_model_fits(t4_cluster: Path) -> None:
    res = cost("--model", "BERT-3L", "--cluster", str(t4_cluster), "--strategy", "allreduce-single")
    assert res.exit_code == 0, res.output
    assert "fits in memory" in res.output and "does not fit" not in res.output
