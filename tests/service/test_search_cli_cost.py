"""`strategist search create --objective cost --throughput-limit X` and the status of such a search."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from service.api.schemas.costs import CostsPublic
from service.api.schemas.searches import SearchStatusPublic
from service.cli import app
from service.client import StrategistClient

BASE = ["search", "create", "--model", "CTRDNN", "--cluster", "HeterPS-2GPU", "--token", "t"]


def test_throughput_limit_makes_a_heterogeneous_cost_search(sent: list[dict[str, Any]]) -> None:
    r = CliRunner().invoke(app, [*BASE, "--objective", "cost", "--throughput-limit", "1e5"])
    assert r.exit_code == 0 and r.output.strip() == "7", r.output
    r = CliRunner().invoke(
        app, [*BASE, "--objective", "cost", "--throughput-limit", "250000", "--scheduler", "rl"]
    )
    assert r.exit_code == 0, r.output
    assert [(b["objective"], b["plan_kind"], b["plan_options"]) for b in sent] == [
        ("cost", "heterogeneous", {"throughput_limit": 1e5, "scheduler": "exact"}),
        ("cost", "heterogeneous", {"throughput_limit": 250000.0, "scheduler": "rl"}),
    ]
    # without a limit, --objective cost stays an AutoSync search
    assert CliRunner().invoke(app, [*BASE, "--objective", "cost"]).exit_code == 0
    assert (sent[-1]["plan_kind"], sent[-1]["plan_options"]) == ("sync", None)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--objective", "cost", "--throughput-limit", "-1"], "--throughput-limit"),
        (["--objective", "cost", "--throughput-limit", "0"], "--throughput-limit"),
        (["--objective", "cost", "--throughput-limit", "nan"], "--throughput-limit"),
        (["--objective", "cost", "--throughput-limit", "inf"], "--throughput-limit"),
        (["--objective", "cost", "--throughput-limit", "1e5", "--scheduler", "magic"], "--scheduler"),
        (["--throughput-limit", "1e5"], "--objective"),
    ],
)
def test_bad_value_is_one_line_exit_2(sent: list[dict[str, Any]], args: list[str], option: str) -> None:
    r = CliRunner().invoke(app, [*BASE, *args])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option}:"), r.output
    assert sent == []


def _status() -> SearchStatusPublic:
    now = datetime(2026, 11, 25, tzinfo=UTC)
    search = {
        "id": 7,
        "name": "",
        "owner_id": 1,
        "model_spec_id": 1,
        "cluster_spec_id": 2,
        "model_name": "CTRDNN",
        "cluster_name": "HeterPS-2GPU",
        "objective": "cost",
        "trial_budget": 4,
        "candidates_per_round": 2,
        "samples_per_round": 2,
        "approval_required": False,
        "seed": 0,
        "compression": "none",
        "space": "lossless",
        "plan_kind": "heterogeneous",
        "plan_options": {"throughput_limit": 1e5},
        "state": "completed",
        "current_round": 2,
        "failure_reason": None,
        "created_at": now,
        "updated_at": now,
        "finished_at": now,
    }
    return SearchStatusPublic.model_validate(
        {"search": search, "trials_by_state": {"succeeded": 3}, "candidate_trials_done": 2,
         "best_trial_id": 2, "best_candidate_id": 2, "best_time": 0.0126, "baselines": [], "speedups": {}}
    )  # fmt: skip


def _plan(
    label: str, stages: list[tuple[int, int, str, int]], pred: tuple[float, float], meas: Any
) -> dict[str, Any]:
    kind, _, ident = label.partition(":")
    return {
        "label": label,
        "candidate_id": int(ident) if kind == "candidate" else None,
        "trial_id": 1,
        "baseline": ident if kind == "baseline" else None,
        "round_index": 1 if kind == "candidate" else None,
        "rank": 1 if kind == "candidate" else None,
        "state": "succeeded",
        "scheduler": "exact",
        "predicted_money": pred[0],
        "predicted_throughput": pred[1],
        "price_per_hour": 9.5,
        "measured_money": meas[0],
        "measured_throughput": meas[1],
        "meets_limit": meas[1] >= 1e5,
        "on_predicted_front": True,
        "on_measured_front": True,
        "failure": None,
        "stages": [
            {
                "first_layer": a,
                "last_layer": b,
                "resource_type": t,
                "units": k,
                "price_per_hour": 1.0,
                "predicted_throughput": pred[1],
                "measured_throughput": meas[1],
            }
            for a, b, t, k in stages
        ],
        "plan": {
            "kind": "resource_plan",
            "model": "CTRDNN",
            "cluster": "HeterPS-2GPU",
            "stages": [
                {"first_layer": a, "last_layer": b, "resource_type": t, "units": k} for a, b, t, k in stages
            ],
        },
    }


def test_status_of_a_cost_search_shows_money_throughput_and_provisioning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    best = _plan(
        "candidate:2", [(0, 4, "cpu-core", 128), (4, 16, "T4", 3)], (25.17, 152424.0), (26.5, 162000.0)
    )
    aibox = _plan(
        "baseline:aibox", [(0, 1, "cpu-core", 128), (1, 16, "T4", 3)], (33.78, 113586.0), (35.56, 107907.0)
    )
    costs = CostsPublic.model_validate(
        {"search_id": 7, "throughput_limit": 1e5, "scheduler": "exact", "best": best, "cheapest_predicted": best,
         "savings": {"aibox": 35.56 / 26.5}, "plans": [best, aibox]}
    )  # fmt: skip
    monkeypatch.setattr(StrategistClient, "search", lambda self, sid: _status())
    monkeypatch.setattr(StrategistClient, "costs", lambda self, sid: costs)
    r = CliRunner().invoke(app, ["search", "status", "7", "--token", "t"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    out = r.output
    assert "cost objective" in out and "limit 100000 samples/s" in out
    assert "layers 0-3 cpu-core x128 | 4-15 T4 x3" in out  # the per-stage provisioning
    assert "25.17" in out and "1.524e+05" in out and "26.50" in out and "1.62e+05" in out
    assert "best: candidate:2 26.50 USD at 1.62e+05 samples/s" in out
    assert "aibox costs 1.34x the best plan" in out
