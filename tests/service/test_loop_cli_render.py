"""What `strategist search status|watch` and the demo print: strategy summaries and the best table."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from service.cli.search_cli_commands import best_table, describe_strategy, honest_lines

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


LOSSLESS = {"variables": [{"variable": "a", "shards": [{"kind": "collective", "group": 0}]}]}


def test_best_table_ranks_measured_candidates_and_compares_like_with_like() -> None:
    status = {
        "baselines": [
            {"name": "horovod@64MiB", "median_time": 0.8},
            {"name": "horovod@4MiB", "median_time": 0.6},
            {"name": "horovod-fp16@64MiB", "median_time": 0.5},
        ]
    }
    trials: list[dict[str, Any]] = [
        {"id": 1, "baseline": "horovod@64MiB", "candidate_id": None, "median_time": 0.8, "state": "succeeded",
         "strategy": LOSSLESS, "round_index": None},
        {"id": 2, "baseline": None, "candidate_id": 7, "median_time": 0.3, "predicted_time": 0.25,
         "strategy": LOSSLESS, "round_index": 1, "state": "succeeded"},
        {"id": 3, "baseline": None, "candidate_id": 8, "median_time": 0.4, "predicted_time": 0.2,
         "strategy": STRATEGY, "round_index": 2, "state": "succeeded"},
        {"id": 4, "baseline": None, "candidate_id": 9, "median_time": None, "strategy": STRATEGY,
         "round_index": 2, "state": "running"},
    ]  # fmt: skip
    console = Console(width=250, record=True)
    console.print(best_table(status, trials))
    lines = [ln for ln in console.export_text().splitlines() if ln.strip().startswith("│")]
    assert [ln.split("│")[1].strip() for ln in lines] == ["2", "3", "1"]  # best first, baseline last
    cells = [[c.strip() for c in ln.split("│")[1:-1]] for ln in lines]
    # lossless candidate 7: vs the tuned (fastest) horovod 0.6 / 0.3, not vs the lossy family
    assert cells[0][2] == "lossless" and cells[0][-2:] == ["2.00×", "-"]
    # lossy candidate 8 (fp16): only vs the lossy family, 0.5 / 0.4
    assert cells[1][2] == "lossy" and cells[1][-2:] == ["-", "1.25×"]


def test_honest_lines_state_the_space_the_tuned_baselines_and_the_interval() -> None:
    status = {
        "search": {"space": "lossy", "compression": "fp16"},
        "families": [{"family": "horovod", "lossy": False, "measured": 4, "tuned": {"label": "horovod@4MiB", "median": 0.6},
                      "untuned": {"label": "horovod@64MiB", "median": 0.8}}],
        "reports": [
            {"space": "lossless", "accuracy": "lossless", "winner": {"label": "candidate:7", "median": 0.9},
             "ratios": [{"family": "horovod", "baseline": "horovod@4MiB", "ratio": 0.667, "low": 0.6, "high": 0.7}]},
            {"space": "lossy", "accuracy": "lossy, accuracy not verified", "winner": {"label": "candidate:8", "median": 0.4},
             "ratios": [{"family": "horovod-fp16", "baseline": "horovod-fp16@1MiB", "ratio": 1.25, "low": 1.1, "high": 1.4}]},
        ],
    }  # fmt: skip
    text = "\n".join(honest_lines(status))
    assert "space: lossy (compression fp16)" in text
    assert (
        "tuned horovod: horovod@4MiB 0.600 s (fastest of 4 measured; untuned horovod@64MiB 0.800 s)" in text
    )
    assert (
        "0.67x [95% 0.60-0.70] vs tuned horovod (horovod@4MiB): not faster; horovod@4MiB stays the choice"
        in text
    )
    assert "lossy winner candidate:8: 0.400 s/iteration [lossy, accuracy not verified]" in text
    assert "1.25x [95% 1.10-1.40] vs tuned horovod-fp16" in text
