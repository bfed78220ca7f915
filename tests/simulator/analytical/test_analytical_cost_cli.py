"""`strategist cost`: JSON shape, the readable table, strategy files, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from simulator import zoo
from simulator.analytical import baseline, cost_breakdown
from simulator.spec import dump_json

runner = CliRunner()


@pytest.mark.parametrize("name", ["horovod", "ps", "ps-naive", "allreduce-single"])
def test_cost_json_for_each_baseline(name: str) -> None:
    res = runner.invoke(
        app, ["cost", "--model", "BERT-3L", "--cluster", "B7", "--strategy", name, "--json", "--trials", "3"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in ("t_comp", "t_sync", "t_iter", "throughput", "ps", "collective"):
        assert key in out
    # Eq. 1 per bucket: never below compute, never above no overlap at all (a PS shard's push and
    # pull overlap on a full-duplex link, so T can be below Eq. 2's T_sync; see analytical.overlap)
    assert out["t_comp"] - 1e-12 <= out["t_iter"] <= out["t_comp"] + out["t_sync"] + 1e-12
    # the parts add up: T = max(T_comp, E), E the overlapped synchronisation's end
    assert out["t_iter"] == pytest.approx(max(out["t_comp"], out["t_sync_end"]))
    gpus, batch = zoo.cluster("B7").num_gpus, zoo.model("BERT-3L").batch_size
    assert out["throughput"] == pytest.approx(batch * gpus / out["t_iter"])
    if name.startswith("ps"):
        assert out["ps"] and not out["collective"]
        assert out["t_ps"] == pytest.approx(max(s["time"] for s in out["ps"].values()))
    else:
        assert out["collective"] and not out["ps"]
        assert out["t_cc"] == pytest.approx(sum(c["time"] for c in out["collective"].values()))


def test_cost_of_a_strategy_file_and_table(tmp_path: Path) -> None:
    model, cluster = zoo.model("BERT-3L"), zoo.cluster("B9")
    s = baseline("allreduce-single", model, cluster)
    path = tmp_path / "s.json"
    path.write_text(dump_json(s))
    res = runner.invoke(
        app, ["cost", "--model", "BERT-3L", "--cluster", "B9", "--strategy", str(path), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["t_iter"] == pytest.approx(cost_breakdown(model, cluster, s).t_iter)
    table = runner.invoke(app, ["cost", "--model", "BERT-3L", "--cluster", "B9", "--strategy", str(path)])
    assert table.exit_code == 0
    assert "T = max(T_comp, E)" in table.output and "Collective calls" in table.output


def test_cost_errors_are_one_line_with_exit_2(tmp_path: Path) -> None:
    res = runner.invoke(app, ["cost", "--model", "BERT-3L", "--cluster", "B7", "--strategy", "nccl"])
    assert res.exit_code == 2 and "--strategy" in res.output
    # A strategy for another cluster names the field that does not fit.
    s = baseline("ps-naive", zoo.model("BERT-3L"), zoo.cluster("A2"))
    path = tmp_path / "wrong.json"
    path.write_text(dump_json(s))
    res = runner.invoke(app, ["cost", "--model", "BERT-3L", "--cluster", "B7", "--strategy", str(path)])
    assert res.exit_code == 2 and "cluster" in res.output
    res = runner.invoke(app, ["cost", "--model", "no-such-model", "--cluster", "B7", "--strategy", "ps"])
    assert res.exit_code == 2 and "no-such-model" in res.output
