"""The dashboard's numbers, without a browser: best-so-far series, per-variable rows, baseline diffs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from service import domain as d
from service.web.render import nbytes, seconds
from service.web.views import best_so_far, diff_counts, strategy_layers, summarize
from simulator.spec import ModelSpec, Strategy
from simulator.spec.io import parse_as

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _trial(
    id: int, state: str, median: float | None, *, baseline: str | None = None, minute: int = 0
) -> d.Trial:
    return d.Trial(
        id=id, search_id=1, round_index=None if baseline else 1, candidate_id=None if baseline else id,
        baseline=baseline, cluster_name="c", strategy={}, predicted_time=None, state=state,  # type: ignore[arg-type]
        attempt=1, claimed_by=None, heartbeat_at=None, stop_requested=False, failure_reason=None,
        iteration_times=(), median_time=median, measurement=None, created_at=T0, started_at=None,
        finished_at=T0 + timedelta(minutes=minute) if state in ("succeeded", "failed") else None,
    )  # fmt: skip


def test_best_so_far_is_the_running_minimum_in_finishing_order() -> None:
    trials = [
        _trial(1, "succeeded", 0.9, baseline="horovod", minute=1),
        _trial(2, "succeeded", 0.5, minute=5),
        _trial(3, "succeeded", 0.7, minute=2),
        _trial(4, "failed", None, minute=3),
        _trial(5, "queued", None),
        _trial(6, "succeeded", 0.4, minute=9),
        _trial(7, "failed", None, baseline="ps", minute=4),
    ]
    chart = best_so_far(trials)
    assert chart.trial_ids == (3, 4, 2, 6)  # finishing order; baselines and unfinished left out
    assert chart.trial_numbers == (1, 2, 3, 4)
    assert chart.measured == (0.7, None, 0.5, 0.4)
    assert chart.best == (0.7, 0.7, 0.5, 0.4)
    assert chart.baselines == {"horovod": 0.9}  # the failed PS baseline draws no line


def _model(specs: Any) -> ModelSpec:
    return parse_as(ModelSpec, specs.model())


def test_strategy_rows_and_baseline_diffs(specs: Any) -> None:
    model = _model(specs)
    allreduce = parse_as(Strategy, specs.strategy("a"))
    ps = parse_as(Strategy, specs.strategy("p", ps=True))
    mixed_json = specs.strategy("m")
    mixed_json["variables"][0] = {
        "variable": "fc1.weight",
        "partition": {"axis": 0, "shards": 2},
        "shards": [
            {"kind": "ps", "server": "n1", "local_replication": True},
            {"kind": "collective", "group": 3},
        ],
    }
    mixed = parse_as(Strategy, mixed_json)
    layers = strategy_layers(model, mixed, {"horovod": allreduce, "ps": ps})
    assert [(layer.name, [v.name for v in layer.variables]) for layer in layers] == [
        ("fc1", ["fc1.weight", "fc1.bias"]),
        ("fc2", ["fc2.weight"]),
    ]
    w = layers[0].variables[0]
    assert w.partition == "axis 0 × 2"
    assert [
        (s.shape, s.bytes, s.synchronizer, s.placement, s.local_replication, s.group) for s in w.shards
    ] == [
        ((32, 32), 32 * 32 * 4, "PS", "n1", True, None),
        ((32, 32), 32 * 32 * 4, "all-reduce", "", False, 3),
    ]
    assert w.differs_from == ("horovod", "ps")
    assert layers[0].variables[1].differs_from == ("ps",)  # fc1.bias: same all-reduce group 0 as horovod
    assert diff_counts(model, layers, ("horovod", "ps")) == {"horovod": 1, "ps": 3}
    summary = summarize(model, mixed)
    assert (summary.variables, summary.shards, summary.servers, summary.groups) == (3, 4, ("n1",), 2)
    assert summary.ps_bytes == 32 * 32 * 4
    assert summary.collective_bytes == 32 * 32 * 4 + 32 * 4 + 32 * 10 * 4


def test_formatting() -> None:
    assert (seconds(None), seconds(0.0004), seconds(0.25), seconds(3.21)) == (
        "—",
        "400 µs",
        "250.0 ms",
        "3.210 s",
    )
    assert (nbytes(512), nbytes(2048), nbytes(3 * 1024**2)) == ("512 B", "2.0 KB", "3.0 MB")
