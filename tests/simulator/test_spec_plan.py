"""Plan: batch arithmetic, kFkB group sizes, stage-count check and JSON round trip (issue 17)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from runtime.executor.reference import linear, two_by_two
from simulator.spec import ModelSpec, Plan, SpecError, Stage, Strategy, VariableStrategy
from simulator.spec.io import parse_spec
from simulator.spec.plan import plan_issues


def plan(**kw: object) -> Plan:
    base: dict[str, object] = {
        "stages": [
            Stage(first_layer=0, last_layer=2, devices=("n0:0", "n1:0"), replicate=2),
            Stage(first_layer=2, last_layer=4, devices=("n0:1", "n1:1"), replicate=2),
        ],
        "global_batch": 16,
        "batch_shares": {"n0:0": 8, "n1:0": 8},
        "micro_batch_size": 2,
        "num_micro_batches": 8,
        "schedule": "kfkb",
        "k": 2,
    }
    base.update(kw)
    return Plan.model_validate(base)


def test_replica_micro_batches_and_group_sizes() -> None:
    p = plan()
    assert [p.replica_micro_batches(d) for d in (0, 1)] == [4, 4]
    assert p.group_size(4) == 2
    assert plan(schedule="1f1b", k=1).group_size(4) == 1
    assert plan(schedule="gpipe", k=1).group_size(4) == 4
    assert plan(k=8).group_size(4) == 4  # k larger than a replica's count runs GPipe
    uneven = plan(batch_shares={"n0:0": 12, "n1:0": 4})
    assert [uneven.replica_micro_batches(d) for d in (0, 1)] == [6, 2]


@pytest.mark.parametrize(
    ("change", "path", "reason"),
    [
        ({"num_micro_batches": 4, "k": 1}, "num_micro_batches", "global_batch is 16"),
        (
            {"batch_shares": {"n0:0": 9, "n1:0": 7}},
            "batch_shares.n0:0",
            "not a multiple of micro_batch_size 2",
        ),
        ({"k": 3}, "k", "must divide"),
        ({"schedule": "1f1b", "k": 2}, "k", "must be 1"),
    ],
)
def test_batch_arithmetic_is_checked(change: dict[str, object], path: str, reason: str) -> None:
    with pytest.raises(ValidationError) as e:
        plan(**change)
    issues = SpecError.from_pydantic(e.value).issues
    assert any(i.dotted == path and reason in i.reason for i in issues), issues


def test_more_stages_than_devices_is_refused() -> None:
    model = ModelSpec(name="m", batch_size=4, layers=tuple(linear(f"l{i}", 4, 4) for i in range(6)))
    stages = [Stage(first_layer=i, last_layer=i + 1, devices=(f"n{i % 2}:{i // 2}",)) for i in range(6)]
    p = Plan(
        stages=stages,
        global_batch=6,
        batch_shares={"n0:0": 6},
        micro_batch_size=1,
        num_micro_batches=6,
    )
    issues = plan_issues(p, model, two_by_two())
    assert any(i.dotted == "stages" and "6 stages > 4 devices" in i.reason for i in issues)


def test_plan_round_trips_through_json_inside_a_strategy() -> None:
    model = ModelSpec(name="m", batch_size=4, layers=tuple(linear(f"l{i}", 4, 4) for i in range(4)))
    s = Strategy(
        variables=[
            VariableStrategy(variable=v.name, shards=[{"kind": "collective"}]) for v in model.variables
        ],
        plan=plan(),
    )
    back = parse_spec(json.loads(s.model_dump_json()))
    assert back == s
    assert isinstance(back, Strategy) and back.plan is not None and back.plan.k == 2
    s.check(model, two_by_two())
