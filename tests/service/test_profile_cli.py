"""strategist profile and strategist cost --profiles: store a profile, use it, name bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from service.cli import app

runner = CliRunner()


def _files(tmp_path: Path, specs: Any) -> tuple[Path, Path]:
    model, cluster = tmp_path / "m.json", tmp_path / "c.json"
    model.write_text(json.dumps(specs.model()))
    cluster.write_text(json.dumps(specs.cluster()))
    return model, cluster


def test_profile_then_cost_uses_it(tmp_path: Path, specs: Any) -> None:
    model, cluster = _files(tmp_path, specs)
    out = tmp_path / "profiles"
    r = runner.invoke(
        app,
        [
            "profile",
            "--model",
            str(model),
            "--device-name",
            "T4",
            "--repeats",
            "1",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    stored = out / "tiny-mlp__T4__float32__b8.json"
    prof = json.loads(stored.read_text())
    assert [lt["name"] for lt in prof["layers"]] == ["fc1", "fc2"] and prof["batch"] == 8
    measured = sum(lt["fwd_s"] + lt["bwd_s"] for lt in prof["layers"])
    args = ["cost", "--model", str(model), "--cluster", str(cluster), "--strategy", "horovod", "--json"]
    with_profile = json.loads(runner.invoke(app, [*args, "--profiles", str(out)]).output)
    assert with_profile["compute_source"] == "profile" and with_profile["compute_profiled_layers"] == 2
    assert abs(with_profile["t_comp"] - measured) < 1e-12
    empty = tmp_path / "none"
    roofline = json.loads(runner.invoke(app, [*args, "--profiles", str(empty)]).output)
    assert roofline["compute_source"] == "roofline" and roofline["t_comp"] != with_profile["t_comp"]


def test_bad_input_is_a_one_line_error(tmp_path: Path, specs: Any) -> None:
    model, cluster = _files(tmp_path, specs)
    r = runner.invoke(app, ["profile", "--model", str(model), "--device", "tpu"])
    assert r.exit_code == 2 and "--device" in r.output
    r = runner.invoke(app, ["profile", "--model", str(model), "--dtype", "int8"])
    assert r.exit_code == 2 and "--dtype: must be one of" in r.output
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "x.json").write_text('{"kind": "profile",\n "model": "tiny-mlp",\n "batch": -1}\n')
    args = ["cost", "--model", str(model), "--cluster", str(cluster), "--strategy", "horovod"]
    r = runner.invoke(app, [*args, "--profiles", str(folder)])
    assert r.exit_code == 2
    assert f"{folder / 'x.json'}: line 3: batch: " in r.output
    r = runner.invoke(app, [*args, "--compute-dtype", "int4"])
    assert r.exit_code == 2 and "--compute-dtype" in r.output
