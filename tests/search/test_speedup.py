"""Honest speed-up reporting: like against like, tuned >= untuned, bootstrap interval (search/speedup.py)."""

from __future__ import annotations

import numpy as np
import pytest

from search.speedup import (
    NOT_VERIFIED,
    Measured,
    bootstrap_ratio,
    family_results,
    format_ratio,
    space_reports,
)


def m(label: str, median: float, space: str = "lossless", spread: float = 0.0) -> Measured:
    times = tuple(median + spread * d for d in (-2, -1, 0, 1, 2))
    return Measured(label, space, times)  # type: ignore[arg-type]


def test_bootstrap_of_constant_runs_is_the_ratio() -> None:
    assert bootstrap_ratio([2.0] * 5, [1.0] * 7) == (2.0, 2.0)


def test_bootstrap_interval_covers_the_ratio_and_narrows_with_data() -> None:
    rng = np.random.default_rng(1)
    short_b, short_w = rng.normal(2.0, 0.2, 5), rng.normal(1.0, 0.1, 5)
    long_b, long_w = rng.normal(2.0, 0.2, 200), rng.normal(1.0, 0.1, 200)
    lo, hi = bootstrap_ratio(short_b, short_w)
    assert lo <= np.median(short_b) / np.median(short_w) <= hi
    lo2, hi2 = bootstrap_ratio(long_b, long_w)
    assert hi2 - lo2 < hi - lo and lo2 < 2.0 < hi2
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_ratio([], [1.0])


def test_tuned_is_the_fastest_member_never_slower_than_untuned() -> None:
    runs = [m("horovod@64MiB", 1.0), m("horovod@4MiB", 0.8), m("horovod@1MiB", 0.9), m("ps-naive", 3.0),
            m("ps@balanced", 3.5)]  # fmt: skip
    fams = {f.family: f for f in family_results(runs, failed=["ps@part-4MiB"])}
    assert fams["horovod"].tuned.label == "horovod@4MiB"  # type: ignore[union-attr]
    assert fams["horovod"].untuned.label == "horovod@64MiB"  # type: ignore[union-attr]
    assert fams["ps"].tuned.label == "ps-naive"  # type: ignore[union-attr]  # partitioned PS was slower here
    assert fams["ps"].members == ("ps-naive", "ps@balanced", "ps@part-4MiB") and fams["ps"].measured == 2
    rng = np.random.default_rng(0)
    for _ in range(50):
        medians = rng.uniform(0.1, 2.0, 4)
        runs = [m(f"horovod@{s}MiB", float(t)) for s, t in zip((64, 16, 4, 1), medians, strict=True)]
        (f,) = family_results(runs)
        assert f.tuned is not None and f.untuned is not None and f.tuned.median <= f.untuned.median


def test_lossless_winner_meets_lossless_baselines_lossy_meets_lossy() -> None:
    fams = family_results([m("horovod@64MiB", 1.0), m("ps-naive", 2.0), m("horovod-fp16@64MiB", 0.7, "lossy"),
                           m("ddp-powersgd@r1", 0.6, "lossy")])  # fmt: skip
    cands = [m("candidate:1", 0.5), m("candidate:2", 0.25, "lossy"), m("candidate:3", 0.8)]
    lossless, lossy = space_reports(cands, fams)
    assert lossless.winner.label == "candidate:1" and lossless.accuracy == "lossless"  # type: ignore[union-attr]
    assert {r.family: r.ratio for r in lossless.ratios} == {"horovod": 2.0, "ps": 4.0}
    assert lossy.winner.label == "candidate:2" and lossy.accuracy == NOT_VERIFIED  # type: ignore[union-attr]
    assert {r.family: r.ratio for r in lossy.ratios} == {"horovod-fp16": pytest.approx(2.8),
                                                         "ddp-powersgd": pytest.approx(2.4)}  # fmt: skip
    _, verified = space_reports(cands, fams, {"candidate:2": "time-to-target 1.3x"})
    assert verified.accuracy == "time-to-target 1.3x"


def test_a_slower_winner_is_reported_as_not_faster() -> None:
    fams = family_results([m("horovod@64MiB", 1.0)])
    (rep,) = space_reports([m("candidate:1", 2.0)], fams)
    assert rep.ratios[0].ratio == 0.5
    assert "not faster" in format_ratio(rep.ratios[0]) and "1.00x" in format_ratio(rep.ratios[0])
