"""A search's trials as rows for a spreadsheet: the same columns for every plan kind (issue 43).

``GET /api/v1/searches/{id}/trials/export?format=csv|json``, ``StrategistClient.export_trials``,
``strategist search export-trials`` and the dashboard's search page all serve these rows.

Decisions:

- **One row per trial** (baselines and candidates), oldest first, with the columns of ``COLUMNS``
  whatever the plan kind: ``plan`` is ``service.plans.results.describe`` of the trial's document
  (one line for a sync strategy, a pipeline, a hybrid or a heterogeneous plan), so a spreadsheet
  of a pipeline search and of a sync search line up.
- **Times are seconds per iteration** (``predicted_s``: the simulator's prediction, empty for a
  baseline that was not predicted; ``measured_median_s``: the median of the measured iterations).
- **The speed-up of every row is against the search's result baseline** (``speedup_vs``: the
  ``baseline`` of ``service.plans.results.plan_result``, the same one the API's ``result``, the
  CLI and the dashboard name), never against each row's own favourite: ``speedup`` = median time
  of that baseline / median time of the row (> 1: the row is faster), with the 95 % percentile
  bootstrap interval of that ratio (``speedup_low``, ``speedup_high``; ``search.speedup``'s
  ``bootstrap_ratio``, its default resamples and seed, so the numbers match the search page).
  It is a *time* ratio for every kind, a heterogeneous (cost-objective) search included: its
  result compares money, and its plans' money is on ``GET /searches/{id}/costs``. The baseline's
  own row reads 1.0. Empty while the row or the baseline has no measurement.
- Empty cells are empty strings in CSV and ``null`` in JSON.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from search.speedup import bootstrap_ratio
from service.domain import Trial
from service.plans.results import PlanResult, describe

#: The columns of every export, in order (the CSV header; the JSON rows' keys).
COLUMNS = (
    "trial_id",
    "round",
    "kind",  # 'baseline' or 'candidate'
    "baseline",  # the baseline's name ('' for a candidate)
    "plan_kind",
    "status",
    "plan",
    "predicted_s",
    "measured_median_s",
    "iterations",
    "speedup",
    "speedup_low",
    "speedup_high",
    "speedup_vs",
)


@dataclass(frozen=True)
class Export:
    """The rows of one search's export and what their speed-ups are against."""

    search_id: int
    plan_kind: str
    speedup_vs: str | None  # the result baseline's label, None before one is measured
    rows: tuple[dict[str, Any], ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "search_id": self.search_id,
            "plan_kind": self.plan_kind,
            "speedup_vs": self.speedup_vs,
            "columns": list(COLUMNS),
            "rows": list(self.rows),
        }

    def as_csv(self) -> str:
        out = io.StringIO()
        w = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for row in self.rows:
            w.writerow({k: "" if v is None else v for k, v in row.items()})
        return out.getvalue()


def export_rows(search_id: int, plan_kind: str, trials: Sequence[Trial], result: PlanResult) -> Export:
    """The export of a search from its trials (oldest first) and its ``plan_result``."""
    by_id = {t.id: t for t in trials}
    base = by_id.get(result.baseline.trial_id) if result.baseline is not None else None
    base_times = base.iteration_times if base is not None and base.median_time else ()
    vs = result.baseline.label if result.baseline is not None and base_times else None
    rows = []
    for t in sorted(trials, key=lambda t: t.id):
        ratio = low = high = None
        if base is not None and base_times and t.median_time and t.iteration_times:
            ratio = (base.median_time or 0.0) / t.median_time
            low, high = bootstrap_ratio(base_times, t.iteration_times)
        rows.append(
            {
                "trial_id": t.id,
                "round": t.round_index,
                "kind": "baseline" if t.baseline else "candidate",
                "baseline": t.baseline or "",
                "plan_kind": plan_kind,
                "status": t.state,
                "plan": describe(t.strategy),
                "predicted_s": t.predicted_time,
                "measured_median_s": t.median_time,
                "iterations": len(t.iteration_times),
                "speedup": ratio,
                "speedup_low": low,
                "speedup_high": high,
                "speedup_vs": vs if ratio is not None else None,
            }
        )
    return Export(search_id, plan_kind, vs, tuple(rows))
