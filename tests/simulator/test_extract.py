"""Model import on small plain-torch modules whose numbers can be checked by hand."""

from __future__ import annotations

import json
import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import typer
from torch import nn
from typer.testing import CliRunner

from service.cli import import_commands
from simulator.extract import embedding_density, extract_model, import_model
from simulator.extract.reference_models import NeuMF, WMTTransformer
from simulator.spec import ModelSpec, dump_json, parse_spec


def test_linear_10_20_has_220_params_and_400_flops_per_sample() -> None:
    # 10*20 weights + 20 biases; forward = 2 * in * out (bias adds are not counted)
    spec = extract_model(nn.Linear(10, 20), torch.empty(1, 10), name="lin", batch_size=1)
    assert spec.params == 220
    assert spec.fwd_flops == 400
    (layer,) = spec.layers
    assert layer.kind == "linear"
    assert [v.name for v in layer.variables] == ["weight", "bias"]
    assert layer.activation_bytes == 20 * 4  # one float32 output row per sample


def test_flops_and_bytes_are_per_sample() -> None:
    spec = extract_model(nn.Linear(10, 20), torch.empty(8, 10), name="lin")
    assert spec.fwd_flops == 400
    assert spec.layers[0].activation_bytes == 80
    assert spec.batch_size == 8  # defaults to the traced batch


def test_conv_counts() -> None:
    # Conv2d(3, 8, 3, padding=1) on 3x16x16: 8*3*3*3 + 8 = 224 params;
    # output 8x16x16 = 2048 values, each 3*3*3 = 27 multiply-adds -> 2 * 2048 * 27 FLOPs.
    spec = extract_model(nn.Conv2d(3, 8, 3, padding=1), torch.empty(2, 3, 16, 16), name="conv")
    assert spec.params == 224
    assert spec.fwd_flops == 2 * 2048 * 27
    assert spec.layers[0].kind == "conv2d"
    assert spec.layers[0].activation_bytes == 2048 * 4


class TwoBranch(nn.Module):
    """x -> a, x -> b; relu(a + b) -> c: the add joins two branches."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.c = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.act(self.a(x) + self.b(x)))


def test_two_branches_give_dag_edges_and_fold_the_activation() -> None:
    spec = extract_model(TwoBranch(), torch.empty(3, 4), name="two")
    by_name = {layer.name: layer for layer in spec.layers}
    assert [layer.name for layer in spec.layers] == ["a", "b", "root", "c"]
    assert by_name["a"].inputs == () and by_name["b"].inputs == ()
    assert by_name["root"].kind == "add" and set(by_name["root"].inputs) == {"a", "b"}
    assert by_name["c"].inputs == ("root",)  # the ReLU (no params, 0 FLOPs) is folded
    assert "act" not in by_name
    assert spec.params == 2 * (4 * 8 + 8) + 8 * 2 + 2
    assert spec.fwd_flops == 2 * (2 * 4 * 8) + 2 * 8 * 2


class Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.drop(self.fc1(x))))


def test_folded_segments_keep_the_data_path() -> None:
    spec = extract_model(Chain(), torch.empty(2, 6), name="chain")
    assert [(layer.name, layer.inputs) for layer in spec.layers] == [("fc1", ()), ("fc2", ("fc1",))]


class Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.users = nn.Embedding(1000, 4)
        self.fc = nn.Linear(4, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.users(ids))


def test_embedding_becomes_a_sparse_variable_with_expected_density() -> None:
    spec = extract_model(Lookup(), torch.zeros(2, dtype=torch.long), name="emb", batch_size=10)
    var = spec.variable("users.weight")
    assert var.sparse
    assert var.density == pytest.approx(1 - (1 - 1 / 1000) ** 10)  # 10 uniform lookups
    assert var.density <= 10 / 1000
    assert spec.layers[0].kind == "embedding" and spec.layers[0].fwd_flops == 0
    dense = extract_model(
        Lookup(), torch.zeros(2, dtype=torch.long), name="emb", batch_size=10, sparse_embeddings=False
    )
    assert not dense.variable("users.weight").sparse


def test_embedding_density_formula() -> None:
    assert embedding_density(1, 5) == 1.0
    assert embedding_density(4, 1) == pytest.approx(0.25)
    assert embedding_density(4, 2) == pytest.approx(1 - 0.75**2)
    assert embedding_density(10**6, 1e9) == 1.0
    assert math.isclose(embedding_density(2_215_888, 256), 256 / 2_215_888, rel_tol=1e-3)


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.out = nn.Linear(8, 50, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(ids))


def test_tied_weights_are_counted_once_and_dense() -> None:
    spec = extract_model(TiedLM(), torch.zeros(2, 5, dtype=torch.long), name="tied")
    assert spec.params == 50 * 8
    assert [v.name for v in spec.variables] == ["embed.weight"]
    assert not spec.variables[0].sparse  # the output projection gives every row a gradient
    out = spec.layers[1]
    assert out.name == "out" and out.variables == () and out.inputs == ("embed",)
    assert out.fwd_flops == 5 * 2 * 8 * 50  # 5 tokens per sample


def test_unused_parameters_are_left_out_with_a_warning() -> None:
    class Unused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(2, 2)
            self.head = nn.Linear(2, 100)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    with pytest.warns(UserWarning, match="not used"):
        spec = extract_model(Unused(), torch.empty(1, 2), name="u")
    assert spec.params == 6


def test_module_is_not_touched_and_float16_cast() -> None:
    lin = nn.Linear(3, 3)
    lin.eval()
    spec = extract_model(lin, torch.empty(1, 3), name="half", dtype=torch.float16)
    assert spec.variables[0].dtype == "float16" and spec.param_bytes == 12 * 2
    assert lin.weight.device.type == "cpu" and lin.weight.dtype == torch.float32 and not lin.training


def test_reference_models_extract_and_round_trip() -> None:
    with torch.device("meta"):
        ncf = NeuMF(num_users=100, num_items=50)
    ids = (torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    spec = extract_model(ncf, ids, name="ncf", batch_size=4)
    assert spec.params == 100 * 40 + 50 * 40 + (64 * 32 + 32) + (32 * 16 + 16) + (16 * 8 + 8) + 17
    assert {v.name for v in spec.variables if v.sparse} == {"embedding_user.weight", "embedding_item.weight"}
    assert parse_spec(json.loads(dump_json(spec))) == spec
    with torch.device("meta"):
        tr = WMTTransformer(vocab=100, d_model=16, heads=2, layers=1, d_ffn=32)
    toks = (torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long))
    t = extract_model(tr, toks, name="tr")
    assert t.params == sum(p.numel() for p in tr.parameters())
    assert isinstance(parse_spec(json.loads(dump_json(t))), ModelSpec)


def test_import_model_from_a_factory_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tiny_factory_mod.py").write_text(
        textwrap.dedent(
            """
            import torch.nn as nn
            def make():
                return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
            def not_a_module():
                return 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = import_model("tiny_factory_mod:make", (4, 10), batch_size=16)
    assert spec.name == "make" and spec.batch_size == 16
    assert spec.params == 220 + 105
    assert [layer.inputs for layer in spec.layers] == [(), ("0",)]
    with pytest.raises(ValueError, match=r"not a torch\.nn\.Module"):
        import_model("tiny_factory_mod:not_a_module", (1, 10))
    with pytest.raises(ValueError, match="MODULE:FACTORY"):
        import_model("no_colon_here", (1, 10))

    app = typer.Typer()
    app.callback()(lambda: None)  # a group, so the command is addressed by name as in `strategist`
    import_commands.register(app)
    runner = CliRunner()
    out = tmp_path / "out.json"
    args = ["import-model", "tiny_factory_mod:make", "--input-shape", "2,10", "--name", "mlp", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    written = parse_spec(json.loads(out.read_text()))
    assert isinstance(written, ModelSpec) and written.name == "mlp" and written.params == 325
    for bad, field in [
        (["tiny_factory_mod:make", "--input-shape", "2,x"], "--input-shape"),
        (["tiny_factory_mod:make", "--input-shape", "2,10", "--dtype", "float8"], "--dtype"),
        (["tiny_factory_mod:nope", "--input-shape", "2,10"], "MODULE:FACTORY"),
        (["tiny_factory_mod:make", "--input-shape", "2,11"], "tracing"),
    ]:
        result = runner.invoke(app, ["import-model", *bad, "-o", str(out)])
        assert result.exit_code == 2, (bad, result.output)
        assert field in result.output and len(result.output.strip().splitlines()) == 1
    sys.modules.pop("tiny_factory_mod", None)


def test_a_module_called_twice_gives_two_layers_and_one_variable_set() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.fc(x)))

    spec = extract_model(Twice(), torch.empty(1, 4), name="twice")
    assert [(layer.name, layer.inputs) for layer in spec.layers] == [("fc", ()), ("fc#2", ("fc",))]
    assert len(spec.layers[0].variables) == 2 and spec.layers[1].variables == ()
    assert spec.params == 20 and spec.fwd_flops == 2 * (2 * 4 * 4)


def test_a_forward_that_needs_values_falls_back_to_cpu() -> None:
    class DataDependent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.other = nn.Linear(3, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return self.other(h) if bool(h.sum() >= 0) else h  # meta tensors have no values

    with torch.device("meta"):
        model = DataDependent()
    with pytest.warns(UserWarning, match="needs tensor values"):
        spec = extract_model(model, torch.empty(2, 3), name="dd")
    assert [layer.name for layer in spec.layers] == ["fc", "other"]  # zeros: sum >= 0
    assert spec.params == 12 + 20 and spec.fwd_flops == 2 * 3 * 3 + 2 * 3 * 5


def test_roofline_fields_count_activation_bytes_and_kernels_with_folded_ops() -> None:
    # Linear(10, 20) then ReLU (folded into it): addmm reads the 10-float input and writes 20
    # floats (bias and the transposed weight are parameters: not activation traffic), ReLU reads
    # and writes 20 floats: (10 + 20 + 20 + 20) · 4 = 280 bytes per sample, two kernels (the
    # transpose is a view). The last Linear(20, 5): (20 + 5) · 4 = 100 bytes, one kernel.
    m = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 5))
    spec = extract_model(m, torch.empty(4, 10), name="mlp")
    assert [(layer.fwd_bytes, layer.fwd_kernels) for layer in spec.layers] == [(280.0, 2), (100.0, 1)]
    # A 3x3 conv on 3x8x8 with 8 output channels: reads 3·64 floats, writes 8·64: 2816 bytes.
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
    first = extract_model(conv, torch.empty(2, 3, 8, 8), name="conv").layers[0]
    assert first.fwd_bytes == (3 * 64 + 8 * 64 + 2 * 8 * 64) * 4 and first.fwd_kernels == 2
