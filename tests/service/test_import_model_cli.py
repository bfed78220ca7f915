"""`strategist import-model` (issue 43): a module in the current directory imports without
PYTHONPATH, --compute-dtype is recorded, and Hugging Face GPT-2 / BERT configs (built locally on the
meta device, nothing downloaded) give the published parameter counts within 1 %."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app

MODULE = """
from torch import nn


def make_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
"""


def test_a_module_in_the_current_directory_imports_without_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "mymodels_issue43"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    # as the console script runs: neither '' nor the current directory on the path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path), ".")])
    monkeypatch.delitem(sys.modules, name, raising=False)
    out = tmp_path / "mlp.json"
    args = ["import-model", f"{name}:make_mlp", "--input-shape", "4,32", "--compute-dtype", "bfloat16"]
    r = CliRunner().invoke(app, [*args, "-o", str(out)])
    assert r.exit_code == 0, r.output
    spec = json.loads(out.read_text())
    assert spec["compute_dtype"] == "bfloat16" and "computes in bfloat16" in r.output
    params = sum(math.prod(v["shape"]) for layer in spec["layers"] for v in layer.get("variables", []))
    assert params == 32 * 64 + 64 + 64 * 10 + 10


def test_a_bad_compute_dtype_is_one_line() -> None:
    r = CliRunner().invoke(
        app, ["import-model", "x:y", "--input-shape", "1,2", "--compute-dtype", "fp8", "-o", "o"]
    )
    assert (
        r.exit_code == 2 and r.output.startswith("error: --compute-dtype") and len(r.output.splitlines()) == 1
    )


@pytest.mark.parametrize(
    ("config_class", "architecture", "published"),
    [("GPT2Config", "GPT2LMHeadModel", 124e6), ("BertConfig", "BertForMaskedLM", 110e6)],
)
def test_hugging_face_configs_give_the_published_parameter_counts(
    tmp_path: Path, config_class: str, architecture: str, published: float
) -> None:
    transformers = pytest.importorskip("transformers", reason="transformers is in the dev and zoo extras")
    config = getattr(transformers, config_class)()  # the defaults are GPT-2 small / BERT-base
    config.architectures = [architecture]
    config.save_pretrained(tmp_path / "hf")  # a local config.json, as a downloaded model folder has
    out = tmp_path / "spec.json"
    args = ["import-model", "--hf-config", str(tmp_path / "hf" / "config.json"), "--seq-len", "128"]
    r = CliRunner().invoke(app, [*args, "--batch-size", "8", "-o", str(out)])
    assert r.exit_code == 0, r.output
    spec = json.loads(out.read_text())
    params = int(r.output.split(": ")[1].split(" parameters")[0])
    assert abs(params / published - 1) < 0.01, params
    assert spec["batch_size"] == 8 and spec["family"] == "LM"
    assert architecture in spec["source"]


def test_hf_config_errors_name_the_option(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["import-model", "--hf-config", str(tmp_path), "-o", "o.json"])
    assert r.exit_code == 2 and r.output.startswith("error: --hf-config:") and "config.json" in r.output
