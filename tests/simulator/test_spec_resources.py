"""Resource types, links and resource plans: JSON round trips and errors with field paths."""

from __future__ import annotations

import json

import pytest

from simulator import zoo
from simulator.spec import ClusterSpec, ResourcePlan, SpecError, dump_json, parse_spec


def _errors(data: dict) -> str:
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    return str(err.value)


def test_priced_pool_round_trips_and_cites_its_prices() -> None:
    spec = zoo.cluster("HeterPS-4GPU")
    again = parse_spec(json.loads(dump_json(spec)))
    assert isinstance(again, ClusterSpec) and again == spec
    kinds = [t.kind for t in spec.resource_types]
    assert kinds == ["cpu", "gpu", "gpu", "gpu", "gpu"]
    for t in spec.resource_types:
        assert t.price_source.startswith("AWS EC2 On-Demand") and t.price_per_hour > 0
    # A unit is one core (c5.24xlarge: 4.08 USD/h over 48 cores) or one GPU (p3.16xlarge: 24.48 / 8).
    assert spec.resource_types[0].price_per_hour == pytest.approx(4.08 / 48)
    assert spec.resource_types[2].price_per_hour == pytest.approx(24.48 / 8)


def test_resource_plan_round_trips_and_gives_back_its_assignment() -> None:
    plan = ResourcePlan.from_assignment(["cpu", "cpu", "gpu", "cpu"], [3, 2, 1], model="m", cluster="c")
    assert [(s.first_layer, s.last_layer, s.resource_type, s.units) for s in plan.stages] == [
        (0, 2, "cpu", 3),
        (2, 3, "gpu", 2),
        (3, 4, "cpu", 1),
    ]
    assert plan.assignment == ("cpu", "cpu", "gpu", "cpu")
    assert plan.units_by_type() == {"cpu": 4, "gpu": 2}
    again = parse_spec(json.loads(dump_json(plan)))
    assert isinstance(again, ResourcePlan) and again == plan
    with pytest.raises(ValueError, match="units: 2 values for 3 stages"):
        ResourcePlan.from_assignment(["a", "b", "a"], [1, 1])


def test_resource_plan_errors_name_the_field() -> None:
    base: dict = {"kind": "resource_plan", "stages": [
        {"first_layer": 0, "last_layer": 2, "resource_type": "cpu", "units": 1},
        {"first_layer": 2, "last_layer": 3, "resource_type": "cpu", "units": 1},
    ]}  # fmt: skip
    assert _errors(base) == "stages.1.resource_type: same type as stage 0 ('cpu'); merge them into one stage"
    base["stages"][1].update(resource_type="gpu", first_layer=3, last_layer=4)
    assert _errors(base) == "stages.1.first_layer: is 3, expected 2"
    base["stages"][1].update(first_layer=2, units=0)
    assert _errors(base) == "stages.1.units: Input should be greater than or equal to 1"


def test_cluster_resource_errors_name_the_field() -> None:
    data = json.loads(dump_json(zoo.cluster("HeterPS-2GPU")))
    data["resource_types"][2]["name"] = data["resource_types"][1]["name"]
    assert _errors(data).startswith("resource_types.2.name: duplicate resource type")
    data = json.loads(dump_json(zoo.cluster("HeterPS-2GPU")))
    data["resource_links"][0]["b"] = "tpu"
    assert _errors(data) == "resource_links.0.b: unknown resource type 'tpu'"
    data = json.loads(dump_json(zoo.cluster("HeterPS-2GPU")))
    data["resource_types"][1]["host_link_gbps"] = None
    assert _errors(data) == "resource_types.1.host_link_gbps: a GPU type needs its link to host memory"
    data["resource_types"][1]["count"] = 0
    assert "resource_types.1.count: Input should be greater than or equal to 1" in _errors(data)


def test_validate_checks_a_resource_plan_against_its_model_and_pool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from service.cli import app

    plan = ResourcePlan.from_assignment(
        ["c5.24xlarge-core"] + ["p3.16xlarge-V100"] * 4, [64, 17], model="NCE", cluster="HeterPS-2GPU"
    )
    path = tmp_path / "plan.json"
    path.write_text(dump_json(plan))
    out = CliRunner().invoke(app, ["validate", str(path)])
    assert out.exit_code == 2
    flat = " ".join(out.output.split())  # the one-line message may be wrapped to the terminal width
    assert "stages.1.units: 'p3.16xlarge-V100' has 16 units, the plan uses 17" in flat
    path.write_text(
        dump_json(
            plan.model_copy(
                update={"stages": (plan.stages[0], plan.stages[1].model_copy(update={"units": 2}))}
            )
        )
    )
    out = CliRunner().invoke(app, ["validate", str(path)])
    assert out.exit_code == 0 and "valid resource_plan" in out.output
