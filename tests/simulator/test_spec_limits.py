"""simulator.spec.limits: absurd sizes, non-finite numbers and control characters are refused with
the field path, at parse time (so the API, the CLI and the worker refuse them alike)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from simulator import zoo
from simulator.spec import SpecError, load_spec, parse_spec
from simulator.spec.io import parse_as
from simulator.spec.limits import LIMITS, json_issues
from simulator.spec.measurement import Measurement


def _model() -> dict[str, Any]:
    return {
        "kind": "model",
        "name": "m",
        "batch_size": 8,
        "layers": [
            {
                "name": "fc",
                "kind": "linear",
                "fwd_flops": 100.0,
                "activation_bytes": 10.0,
                "variables": [{"name": "w", "shape": [4, 4]}],
            }
        ],
    }


def _cluster() -> dict[str, Any]:
    return {
        "kind": "cluster",
        "name": "c",
        "device_types": [
            {"name": "T4", "fp32_tflops": 8.1, "fp16_tflops": 65, "memory_gb": 16, "memory_bw_gbs": 320}
        ],
        "nodes": [{"name": "n0", "device": "T4", "gpus": 2, "nic_gbps": 10}],
        "intra_node_gbps": 100,
    }


def _issues(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    return [f"{i.dotted}: {i.reason}" for i in e.value.issues]


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = data
    for p in head:
        node = node[p]
    node[last] = value
    return data


def test_every_zoo_spec_is_within_the_limits() -> None:
    for name in zoo.model_names():
        assert zoo.model(name).params <= LIMITS.model_elements
    for name in zoo.cluster_names():
        assert zoo.cluster(name).num_gpus <= LIMITS.gpus


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("nodes.0.gpus", 10**12),  # the poison cluster of issue 20
        ("nodes.0.gpus", LIMITS.gpus_per_node + 1),
        ("nodes.0.nic_gbps", math.inf),
        ("nodes.0.nic_gbps", math.nan),
        ("nodes.0.nic_gbps", 1e308),
        ("nodes.0.nic_gbps", 1e-300),  # positive, but every transfer time would overflow
        ("nodes.0.latency_us", 1e300),
        ("device_types.0.fp32_tflops", math.inf),
        ("intra_node_gbps", -math.inf),
        ("nodes.0.name", "n\x000"),
        ("nodes.0.name", "tab\tname"),
        ("name", "x" * (LIMITS.name_chars + 1)),
        ("description", "nul \x00 inside"),
    ],
)
def test_cluster_bounds_name_the_field(path: str, value: Any) -> None:
    issues = _issues(_with(_cluster(), path, value))
    assert len(issues) == 1 and issues[0].startswith(path + ":"), issues


def test_a_cluster_over_the_total_gpu_limit() -> None:
    nodes = [
        {"name": f"n{i}", "device": "T4", "gpus": LIMITS.gpus_per_node, "nic_gbps": 10}
        for i in range(LIMITS.gpus // LIMITS.gpus_per_node + 1)
    ]
    issues = _issues(_with(_cluster(), "nodes", nodes))
    assert issues == [f"nodes: the cluster has {len(nodes) * 1024} GPUs, more than {LIMITS.gpus}"]


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        ("layers.0.variables.0.shape", [2**70], "layers.0.variables.0.shape"),
        ("layers.0.variables.0.shape", [2**20, 2**21], "layers.0.variables.0.shape"),
        ("layers.0.variables.0.shape", [1] * (LIMITS.shape_rank + 1), "layers.0.variables.0.shape"),
        ("batch_size", 2**70, "batch_size"),
        ("layers.0.fwd_flops", math.inf, "layers.0.fwd_flops"),
        ("layers.0.fwd_flops", math.nan, "layers.0.fwd_flops"),
        ("layers.0.fwd_flops", 1e308, "layers.0.fwd_flops"),
        ("layers.0.activation_bytes", -math.inf, "layers.0.activation_bytes"),
        ("layers.0.variables.0.density", math.nan, "layers.0.variables.0.density"),
        ("layers.0.variables", [], "layers"),  # a model with no variables
        ("name", "a\x00b", "name"),
        ("layers.0.name", "line\nbreak", "layers.0.name"),
        ("layers.0.variables.0.name", "\x1b[31mred", "layers.0.variables.0.name"),
    ],
)
def test_model_bounds_name_the_field(path: str, value: Any, where: str) -> None:
    issues = _issues(_with(_model(), path, value))
    assert len(issues) == 1 and issues[0].startswith(where + ":"), issues


def test_a_model_with_no_variables_says_so() -> None:
    assert _issues(_with(_model(), "layers.0.variables", [])) == [
        "layers: the model has no variables (nothing to synchronise)"
    ]


def test_unicode_names_are_fine() -> None:
    spec = parse_spec(_with(_model(), "name", "modèle-変換器 v2"))
    assert spec.name == "modèle-変換器 v2"


@pytest.mark.parametrize(
    ("sync", "where"),
    [
        ({"kind": "collective", "group": 2**63}, "variables.0.shards.0.group"),
        ({"kind": "ps", "server": "n0", "staleness": 10**9}, "variables.0.shards.0.staleness"),
        ({"kind": "ps", "server": "n\x000"}, "variables.0.shards.0.server"),
    ],
)
def test_strategy_bounds(sync: dict[str, Any], where: str) -> None:
    data = {"kind": "strategy", "variables": [{"variable": "w", "shards": [sync]}]}
    issues = _issues(data)
    assert len(issues) == 1 and issues[0].startswith(where + ":"), issues


def test_strategy_partition_bounds() -> None:
    data = {
        "kind": "strategy",
        "variables": [{"variable": "w", "partition": {"shards": 10**6}, "shards": [{"kind": "collective"}]}],
    }
    assert any(i.startswith("variables.0.partition.shards:") for i in _issues(data))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("iteration_times", [0.1, math.nan]),
        ("iteration_times", [math.inf]),
        ("iteration_times", [1e308]),
        ("iteration_times", [-0.1]),
        ("compute_times", [math.nan]),
        ("scale", math.inf),
        ("warmup", 10**12),
        ("environment", {"host": {"load": math.nan}}),
    ],
)
def test_measurement_numbers_are_finite_and_bounded(field: str, value: Any) -> None:
    with pytest.raises(SpecError) as e:
        parse_as(Measurement, {field: value})
    assert e.value.issues[0].path[0] == field


def test_measurement_failure_text_is_cleaned_not_refused() -> None:
    m = Measurement(failure="boom\x00" + "x" * (LIMITS.text_chars * 2))
    assert m.failure is not None and "\x00" not in m.failure and len(m.failure) == LIMITS.text_chars
    assert m.failure.startswith("boom\ufffd")


def test_json_issues_finds_every_bad_leaf() -> None:
    data = {"a": [1.0, math.inf], "b": {"c": "x\x00"}, "ok": [1, "s", None], "d": "\ud800", "\ud800": 1}
    assert sorted(json_issues(data)) == [
        (("a", 1), "must be a finite number, got inf"),
        (("b", "c"), "must not contain NUL characters"),
        (("d",), "must be valid Unicode (no lone surrogates)"),
        (("\ud800",), "key must be valid Unicode (no lone surrogates)"),
    ]
    deep: Any = 1
    for _ in range(LIMITS.json_depth + 2):
        deep = [deep]
    assert [reason for _, reason in json_issues(deep)] == [f"nested deeper than {LIMITS.json_depth} levels"]


def test_load_spec_turns_every_bad_file_into_a_spec_error(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(json.dumps(_model()).replace("fc", "f\u00e9").encode("latin-1"))
    with pytest.raises(SpecError, match="not UTF-8 text"):
        load_spec(latin1)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SpecError, match="nested too deeply"):
        load_spec(deep)
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps(_with(_model(), "layers.0.fwd_flops", math.nan)))  # json writes NaN
    with pytest.raises(SpecError, match=r"layers\.0\.fwd_flops"):
        load_spec(nan)


def test_a_long_list_of_bad_items_stops_at_the_first() -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"kind": "model", "name": "m", "batch_size": 1, "layers": [1] * 90_000})
    assert [i.path for i in e.value.issues] == [("layers", 0)]  # (was 90,000 issues)
    model = _model()
    model["layers"][0]["variables"] = [{"name": 1}] * 50_000
    with pytest.raises(SpecError) as e:
        parse_spec(model)
    assert {i.path[:4] for i in e.value.issues} == {("layers", 0, "variables", 0)}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("price_per_hour", math.nan),
        ("count", 10**12),
        ("tflops", math.inf),
        ("name", "a\x00"),
        ("nic_gbps", 0.0),
    ],
)
def test_resource_types_of_a_cluster_are_bounded(field: str, value: Any) -> None:
    cpu = {
        "name": "core",
        "kind": "cpu",
        "count": 16,
        "price_per_hour": 0.05,
        "tflops": 0.1,
        "memory_gb": 4,
        "memory_bw_gbs": 10,
        "host_memory_gb": 4,
        "nic_gbps": 1,
    }
    assert parse_spec(_with(_cluster(), "resource_types", [cpu])).resource_types[0].count == 16
    issues = _issues(_with(_cluster(), "resource_types", [cpu | {field: value}]))
    assert issues[0].startswith(f"resource_types.0.{field}:"), issues
