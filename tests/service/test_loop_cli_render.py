"""What `strategist search status|watch` and the demo print: strategy summaries and the best table."""

from __future__ import annotations

from rich.console import Console

from service.cli.search_cli_commands import best_table, describe_strategy

STRATEGY = {
    "variables": [
        {"variable": "a", "partition": {"axis": 0, "shards": 2}, "shards": [
            {"kind": "ps", "server": "n0", "local_replication": True},
            {"kind": "ps", "server": "n1", "local_replication": False},
        ]},
        {"variable": "b", "shards": [{"kind": "collective", "group": 0, "compressor": {"kind": "fp16"}}]},
        {"variable": "c", "shards": [{"kind": "collective", "group": 1, "algorithm": "hierarchical"}]},
    ]
}  # fmt: skip


def test_describe_strategy_counts_every_choice() -> None:
    assert describe_strategy(STRATEGY) == (
        "2 shards all-reduce in 2 group(s) [fp16×1, none×1; hierarchical×1, ring×1]; "
        "2 shards on PS [n0×1, n1×1; 1 with local replication]; 1 variable(s) partitioned"
    )


def test_best_table_ranks_measured_candidates_and_shows_speedups() -> None:
    status = {"baselines": [{"name": "horovod", "median_time": 0.6}]}
    trials = [
        {"id": 1, "baseline": "horovod", "candidate_id": None, "median_time": 0.6, "state": "succeeded",
         "strategy": STRATEGY, "round_index": None},
        {"id": 2, "baseline": None, "candidate_id": 7, "median_time": 0.3, "predicted_time": 0.25,
         "strategy": STRATEGY, "round_index": 1, "state": "succeeded"},
        {"id": 3, "baseline": None, "candidate_id": 8, "median_time": 0.4, "predicted_time": 0.2,
         "strategy": STRATEGY, "round_index": 2, "state": "succeeded"},
        {"id": 4, "baseline": None, "candidate_id": 9, "median_time": None, "strategy": STRATEGY,
         "round_index": 2, "state": "running"},
    ]  # fmt: skip
    console = Console(width=250, record=True)
    console.print(best_table(status, trials))
    lines = [ln for ln in console.export_text().splitlines() if ln.strip().startswith("│")]
    assert [ln.split("│")[1].strip() for ln in lines] == ["2", "3", "1"]  # best first, baseline last
    assert "2.00×" in lines[0] and "1.50×" in lines[1]  # 0.6 / 0.3 and 0.6 / 0.4
