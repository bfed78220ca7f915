"""Every plan kind in a real headless browser (issue 43): the search is created from the dashboard's
form, the loop plans it, its trials are measured here, and the result page shows the kind's best
plan, its baseline and the ratio the API returns (``SearchStatusPublic.result``).

A real ``Stack`` (API, dashboard, loop; no worker) runs on a private zoo: tiny-mlp on two-node
(sync), pp-chain on pp-2 (pipeline), mixed-net on mixed-2 (hybrid), CTRDNN on HeterPS-2GPU
(heterogeneous). Measured medians are set by the test: every baseline 0.30 s, candidates 0.20 s
and faster (heterogeneous: 0.9x the predicted throughput, Formula 8 for the money). Screenshots
go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.client import StrategistClient
from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.plans.trial_export import COLUMNS
from service.settings import Settings
from simulator import zoo
from simulator.spec.measurement import Measurement
from tests.service.conftest import (  # type: ignore[import-not-found]
    ARTIFACTS,
    P100,
    V100,
    chain_model,
    require_chromium,
    small_cluster,
    small_model,
    two_nodes,
)

DATASETS = Path(__file__).resolve().parents[2] / "datasets"
CLUSTERS = ["two-node", "pp-2", "mixed-2", "HeterPS-2GPU"]

pytestmark = pytest.mark.browser

require_chromium()

from playwright.sync_api import Page, expect  # noqa: E402


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    models, clusters = tmp_path / "zoo" / "models", tmp_path / "zoo" / "clusters"
    models.mkdir(parents=True)
    clusters.mkdir()
    for spec in (small_model(), chain_model("pp-chain", [f"b{i}" for i in range(4)]),
                 chain_model("mixed-net", ["features.0", "features.1", "classifier"])):  # fmt: skip
        (models / f"{spec['name']}.json").write_text(json.dumps(spec))
    for spec in (small_cluster(), two_nodes("pp-2", (V100, V100)), two_nodes("mixed-2", (V100, P100))):
        (clusters / f"{spec['name']}.json").write_text(json.dumps(spec))
    shutil.copy(DATASETS / "models" / "CTRDNN.json", models)
    shutil.copy(DATASETS / "clusters" / "HeterPS-2GPU.json", clusters)
    monkeypatch.setenv("STRATEGIST_DATASETS", str(tmp_path / "zoo"))
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{tmp_path / 'strategist.db'}",
        broker_url="memory://",
        api_host="127.0.0.1",
    )
    with Stack(settings, StackConfig(embedded_worker=False, port=0, tick_s=0.2)) as s:
        yield s
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()


def measure_queued(stack: Stack, counter: list[int]) -> None:
    """Report every queued trial: baselines 0.30 s, candidates 0.20 s, 0.19 s, ... (heterogeneous:
    0.9x the predicted throughput and Formula 8's money at it)."""
    with stack.sessions() as s:
        while (claim := repo.claim_trial(s, worker="w", clusters=CLUSTERS)) is not None:
            doc, details = claim.trial.strategy, dict[str, Any]()
            if doc.get("kind") == "heterogeneous_plan":
                thr = 0.9 * doc["predicted"]["throughput"]
                money = doc["samples"] / thr * doc["predicted"]["price_per_hour"] / 3600
                median = doc["batch_size"] / thr
                details = {"throughput": thr, "money": money, "stages": []}
            elif claim.trial.baseline:
                median = 0.30
            else:
                median = 0.20 - 0.01 * counter[0]
                counter[0] += 1
            m = Measurement(iteration_times=(median,) * 3, details=details)
            repo.report_trial(s, trial_id=claim.trial.id, attempt=claim.attempt, claim_token=claim.claim_token,
                              measurement=m)  # fmt: skip


FORMS: dict[str, dict[str, str]] = {
    "sync": {"model": "tiny-mlp", "cluster": "two-node"},
    "pipeline": {"model": "pp-chain", "cluster": "pp-2",
                 "plan_options": '{"stages": 2, "memory_per_device_gb": 0.004}'},
    "hybrid": {"model": "mixed-net", "cluster": "mixed-2",
               "plan_options": '{"annotations": {"features": {"primitive": "replicate"}}, "global_batch": 32}'},
    "heterogeneous": {"model": "CTRDNN", "cluster": "HeterPS-2GPU", "throughput_limit": "100000"},
}  # fmt: skip


@pytest.mark.parametrize("kind", list(FORMS))
def test_each_plan_kind_from_the_form_to_its_result(
    stack: Stack, browser_page: tuple[Page, list[str]], kind: str
) -> None:
    pg, errors = browser_page
    with stack.sessions() as session:
        secret = repo.create_token(session, name="alice", role="user").secret
    api = StrategistClient(stack.url, secret)
    pg.goto(stack.url + "/ui/searches/new")
    pg.fill("[data-testid=token]", secret)
    pg.click("[data-testid=login]")
    pg.goto(stack.url + "/ui/searches/new")
    form = FORMS[kind]
    pg.fill("input[name=model]", form["model"])
    pg.fill("input[name=cluster]", form["cluster"])
    for field, value in (("trial_budget", "2"), ("candidates_per_round", "2"), ("samples_per_round", "4")):
        pg.fill(f"input[name={field}]", value)
    pg.select_option("[data-testid=plan]", kind)
    if "plan_options" in form:
        pg.fill("[data-testid=plan-options]", form["plan_options"])
    if "throughput_limit" in form:
        pg.fill("[data-testid=throughput-limit]", form["throughput_limit"])
    pg.click("[data-testid=create]")
    pg.wait_for_url("**/ui/searches/*")
    sid = int(pg.url.rstrip("/").split("/")[-1])
    assert api.search(sid).search.plan_kind == kind

    counter, deadline = [0], time.monotonic() + 120
    while (st := api.search(sid)).search.state != "completed":  # the loop plans; this test measures
        assert st.search.state not in ("failed", "cancelled"), st.search.failure_reason
        assert time.monotonic() < deadline, f"search not completed within 120 s: {st}"
        measure_queued(stack, counter)
        time.sleep(0.3)
    result = st.result
    assert result is not None and result.best is not None and result.baseline is not None
    assert result.ratio is not None and result.ratio > 1 and not result.slower
    pg.reload()
    expect(pg.locator("[data-testid=result-best]")).to_have_text(result.best.label)
    expect(pg.locator("[data-testid=result-baseline]")).to_have_text(result.baseline.label)
    expect(pg.locator("[data-testid=result-ratio]")).to_have_text(f"{result.ratio:.2f}×")
    best_value: Any = pg.locator("[data-testid=result-best-value]").inner_text()
    if kind == "heterogeneous":
        assert f"${result.best.value:.2f}" in best_value
    else:
        assert f"{result.best.value * 1e3:.1f} ms" in best_value or f"{result.best.value:.3f}" in best_value
    # predicted vs measured is drawn (every kind's candidates are predicted), and the trials export
    expect(pg.locator("[data-testid=pvm-ratio]")).to_contain_text("Median measured / predicted")
    expect(pg.locator("#pvm-chart .main-svg").first).to_be_visible()
    href = pg.locator("[data-testid=export-csv]").get_attribute("href")
    csv_text = pg.request.get(stack.url + str(href)).text()
    assert (
        csv_text.splitlines()[0] == ",".join(COLUMNS)
        and len(csv_text.splitlines()) == len(api.trials(sid)) + 1
    )
    pg.screenshot(path=str(ARTIFACTS / f"13-result-{kind}.png"), full_page=True)
    pg.goto(stack.url + "/ui/searches")
    expect(pg.locator("[data-testid=result]").first).to_contain_text(
        f"{result.ratio:.2f}× vs {result.baseline.label}"
    )
    assert errors == []
