"""`strategist search create --plan pipeline|hybrid`: the options sent, one-line errors; status lines."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.cli.plans_render import plan_lines

BASE = ["search", "create", "--model", "pp-chain", "--cluster", "pp-2", "--token", "t"]


def test_plan_options_are_sent(sent: list[dict[str, Any]]) -> None:
    runs = [
        [],
        ["--plan", "pipeline"],
        ["--plan", "pipeline", "--stages", "4", "--memory-per-device-gb", "12.5", "--fixed"],
        ["--plan", "pipeline", "--stages", "choose", "--global-batch", "64"],
        ["--plan", "hybrid", "--annotate", "features=replicate", "--annotate", "classifier=split:2"],
    ]
    for extra in runs:
        r = CliRunner().invoke(app, [*BASE, *extra])
        assert r.exit_code == 0 and r.output.strip() == "7", r.output
    assert [(b["plan_kind"], b["plan_options"]) for b in sent] == [
        ("sync", None),
        ("pipeline", {}),
        ("pipeline", {"stages": 4, "memory_per_device_gb": 12.5, "adaptive": False}),
        ("pipeline", {"stages": "choose", "global_batch": 64}),
        ("hybrid", {"annotations": {"features": {"primitive": "replicate"},
                                    "classifier": {"primitive": "split", "degree": 2}}}),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        (["--plan", "tensor"], "--plan"),
        (["--plan", "pipeline", "--stages", "many"], "--stages"),
        (["--stages", "2"], "--stages"),
        (["--plan", "hybrid", "--memory-per-device-gb", "8"], "--memory-per-device-gb"),
        (["--plan", "pipeline", "--annotate", "features=replicate"], "--annotate"),
        (["--plan", "hybrid", "--annotate", "features"], "--annotate"),
        (["--plan", "hybrid", "--annotate", "features=shard"], "--annotate"),
        (["--global-batch", "8"], "--global-batch"),
        (["--plan", "pipeline", "--objective", "cost", "--throughput-limit", "100"], "--plan"),
    ],
)
def test_bad_plan_options_are_one_line_exit_2(
    sent: list[dict[str, Any]], extra: list[str], option: str
) -> None:
    r = CliRunner().invoke(app, [*BASE, *extra])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: {option}") and len(r.output.strip().splitlines()) == 1
    assert sent == []


def test_status_lines_show_chosen_kb_switches_and_task_graphs() -> None:
    kb = {"schedule": "kfkb", "k": 2, "b": 1}
    pipe = {
        "id": 3, "baseline": None, "candidate_id": 1, "median_time": 0.0123, "strategy": {"kind": "pipeline"},
        "measurement": {"details": {"plan_kind": "pipeline", "start": {**kb, "candidate": 0},
                                    "chosen": {"schedule": "1f1b", "k": 1, "b": 2, "candidate": 1},
                                    "switches": [{"step": 2, "from": kb, "to": {"schedule": "1f1b", "k": 1, "b": 2},
                                                  "reason": "faster"}]}},
    }  # fmt: skip
    plan = {
        "kind": "hybrid", "name": "annotated", "global_batch": 32,
        "task_graphs": [{"first_layer": 0, "last_layer": 3, "primitive": "replicate", "degree": 2,
                         "virtual_devices": [{"devices": ["n0:0", "n1:0"]}],
                         "batch_shares": {"n0:0": 20, "n1:0": 12}}],
    }  # fmt: skip
    hyb = {"id": 4, "baseline": "even", "median_time": 0.5, "strategy": plan,
           "measurement": {"details": {"plan_kind": "hybrid", "busy_s": {"n0:0": 0.002, "n1:0": 0.003}}}}  # fmt: skip
    assert plan_lines([pipe, hyb]) == [
        "trial 3 (candidate 1): median 12.3 ms, chosen 1f1b k=1 b=2 (started kfkb k=2 b=1), 1 switches",
        "  step 2: kfkb k=2 b=1 -> 1f1b k=1 b=2: faster",
        "trial 4 (baseline even): median 500.0 ms, annotated",
        "  TaskGraph 0 layers 0-2 replicate(2): n0:0 share 20 busy 2.0 ms, n1:0 share 12 busy 3.0 ms",
    ]


def test_plan_heterogeneous_is_accepted_with_its_throughput_limit(sent: list[dict[str, Any]]) -> None:
    """Issue 43: the README's --plan heterogeneous (objective cost implied); without a limit, one line."""
    args = ["search", "create", "--model", "CTRDNN", "--cluster", "HeterPS-2GPU", "--token", "t"]
    r = CliRunner().invoke(app, [*args, "--plan", "heterogeneous", "--throughput-limit", "1e5"])
    assert r.exit_code == 0 and r.output.strip() == "7", r.output
    assert (sent[0]["plan_kind"], sent[0]["objective"]) == ("heterogeneous", "cost")
    assert sent[0]["plan_options"] == {"throughput_limit": 1e5, "scheduler": "exact"}
    r = CliRunner().invoke(app, [*args, "--plan", "heterogeneous"])
    assert r.exit_code == 2 and r.output.startswith("error: --throughput-limit") and len(sent) == 1
