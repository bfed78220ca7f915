"""Every record of the re-collected dataset (datasets/runtimes-v2, retest-v2, unit-probe) can be traced and trusted.

Each names a commit that exists in this repository's history (``collect`` refuses a dirty tree)
and carries what the issue-13 protocol records: the time dilation, the per-call overhead probe,
the background load, and the median's bootstrap interval.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from simulator.spec.records import load_records
from simulator.zoo import datasets_dir

ROOTS = (datasets_dir() / "runtimes-v2", datasets_dir() / "retest-v2", datasets_dir() / "unit-probe")
REPO = Path(__file__).resolve().parents[2]


def _records() -> list[dict]:  # type: ignore[type-arg]
    return [r for root in ROOTS if root.is_dir() for r in load_records(root)]


def _commit_exists(commit: str) -> bool:
    res = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO, capture_output=True)
    return res.returncode == 0


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout: commits cannot be looked up")
def test_every_record_names_a_commit_of_this_history() -> None:
    recs = _records()
    assert recs, f"no records under {ROOTS}"
    commits = {r["environment"]["git_commit"] for r in recs}
    for c in commits:
        assert c and not c.endswith("-dirty") and c != "unknown", c
        assert _commit_exists(c), f"commit {c} is not in this repository's history"


def test_every_record_carries_the_protocol_fields() -> None:
    for r in _records():
        where = (r["model"], r["cluster"], r["source"], r["index"])
        assert r["format"] == "strategist.runtime/2", where
        assert r["dilation"] >= 1.0 and r["scale"] >= 1.0, where
        assert isinstance(r["noisy"], bool) and r["attempts"] >= 1, where
        assert 0.0 <= r["foreign_cpu_share"] <= 1.0, where
        if not r["ok"]:
            continue
        assert {"collective", "ps_round"} <= set(r["per_call_overhead_s"]), where
        lo, hi = r["median_ci95_s"]
        assert lo <= r["median_s"] <= hi, where
        assert len(r["measurement"]["iteration_times"]) >= 10 and r["measurement"]["warmup"] >= 3, where
