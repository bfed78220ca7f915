"""Creating a cost-objective (heterogeneous) search: every bad field is a 422 naming it (issue 18, item 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

API = "/api/v1"
DATASETS = Path(__file__).resolve().parents[2] / "datasets"
GOOD = {
    "model": "CTRDNN",
    "cluster": "HeterPS-2GPU",
    "objective": "cost",
    "plan_kind": "heterogeneous",
    "plan_options": {"throughput_limit": 1e5},
}


def errors(client: TestClient, headers: dict[str, str], body: dict[str, Any] | str) -> list[dict[str, Any]]:
    if isinstance(body, str):
        r = client.post(
            f"{API}/searches", content=body, headers=headers | {"Content-Type": "application/json"}
        )
    else:
        r = client.post(f"{API}/searches", json=body, headers=headers)
    assert r.status_code == 422, r.text
    detail: list[dict[str, Any]] = r.json()["detail"]
    return detail


def options(**over: Any) -> dict[str, Any]:
    return GOOD | {"plan_options": {"throughput_limit": 1e5} | over}


@pytest.mark.parametrize(
    ("body", "loc", "words"),
    [
        (options(throughput_limit=0), ["plan_options", "throughput_limit"], "greater than 0"),
        (options(throughput_limit=-5), ["plan_options", "throughput_limit"], "greater than 0"),
        (options(throughput_limit="fast"), ["plan_options", "throughput_limit"], "number"),
        (options(throughput_limit=1e13), ["plan_options", "throughput_limit"], "less than or equal"),
        (options(scheduler="magic"), ["plan_options", "scheduler"], "'exact'"),
        (options(batch_size=0), ["plan_options", "batch_size"], "greater than or equal to 1"),
        (options(samples_per_epoch=0), ["plan_options", "samples_per_epoch"], "greater than 0"),
        (options(epochs=0), ["plan_options", "epochs"], "greater than or equal to 1"),
        (options(front_step=0), ["plan_options", "front_step"], "greater than 0"),
        (options(baselines=["horovod"]), ["plan_options", "baselines", 0], "'aibox'"),
        (options(speed=3), ["plan_options", "speed"], "Extra inputs"),
        (GOOD | {"plan_options": {"scheduler": "exact"}}, ["plan_options", "throughput_limit"], "required"),
        (GOOD | {"plan_options": None}, ["plan_options"], "throughput_limit"),
        (GOOD | {"objective": "time"}, ["objective"], "objective 'cost'"),
        (GOOD | {"cluster": "two-node"}, ["cluster"], "declares no resource_types"),
        (GOOD | {"plan_kind": "quantum"}, ["plan_kind"], "'heterogeneous'"),
        ({"model": "tiny-mlp", "cluster": "two-node", "plan_options": {"x": 1}}, ["plan_options"], "sync"),
    ],
)
def test_bad_field_is_a_422_naming_it(
    heterps_zoo: Path,
    client: TestClient,
    tokens: dict[str, dict[str, str]],
    body: dict[str, Any],
    loc: list[Any],
    words: str,
) -> None:
    detail = errors(client, tokens["alice"], body)
    locs = [d["loc"] for d in detail]
    assert ["body", *loc] in locs, detail
    msg = next(d["msg"] for d in detail if d["loc"] == ["body", *loc])
    assert words in msg, msg


def test_non_finite_limit_is_refused(
    heterps_zoo: Path, client: TestClient, tokens: dict[str, dict[str, str]]
) -> None:
    for raw in ("NaN", "Infinity", "-Infinity"):
        body = (
            '{"model": "CTRDNN", "cluster": "HeterPS-2GPU", "objective": "cost", "plan_kind": "heterogeneous",'
            f' "plan_options": {{"throughput_limit": {raw}}}}}'
        )
        detail = errors(client, tokens["alice"], body)
        assert any(d["loc"][:2] == ["body", "plan_options"] for d in detail), detail


def test_unreachable_limit_names_the_stage_that_cannot_meet_it(
    heterps_zoo: Path, client: TestClient, tokens: dict[str, dict[str, str]]
) -> None:
    detail = errors(client, tokens["alice"], options(throughput_limit=1e7))
    assert [d["loc"] for d in detail] == [["body", "plan_options", "throughput_limit"]]
    msg = detail[0]["msg"]
    assert msg.startswith(
        "1e+07 samples/s cannot be met on 'HeterPS-2GPU': the most any schedule reaches is "
    )
    assert "stage 0 (layers 0-" in msg and "no number of units reaches 1e+07 samples/s" in msg
    # the reachable maximum it names is met by some schedule, and 1 % more is not
    top = float(msg.split("reaches is ")[1].split(" samples/s")[0])
    ok = client.post(f"{API}/searches", json=options(throughput_limit=top * 0.999), headers=tokens["alice"])
    assert ok.status_code == 201, ok.text
    assert errors(client, tokens["alice"], options(throughput_limit=top * 1.01))


def test_a_baseline_that_cannot_meet_the_limit_is_named(
    heterps_zoo: Path, client: TestClient, tokens: dict[str, dict[str, str]]
) -> None:
    detail = errors(client, tokens["alice"], options(baselines=["aibox", "all-cpu"]))
    assert [d["loc"] for d in detail] == [["body", "plan_options", "baselines", 1]]
    assert detail[0]["msg"].startswith("'all-cpu' cannot meet the limit")
