"""A cost-objective search's dashboard in a real headless browser: the money vs throughput chart draws.

A real ``Stack`` (API, dashboard, loop; no worker) plans a heterogeneous search on CTRDNN and
HeterPS-2GPU; its trials are reported here with measured figures (0.9x the predicted throughput,
Formula 8 for the money); chromium opens the search page and a trial page, the plotly chart must
draw, and no JavaScript or console error may occur. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.client import StrategistClient
from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.settings import Settings
from simulator import zoo
from simulator.spec.measurement import Measurement
from tests.service.conftest import ARTIFACTS, require_chromium  # type: ignore[import-not-found]

DATASETS = Path(__file__).resolve().parents[2] / "datasets"

pytestmark = pytest.mark.browser

require_chromium()

from playwright.sync_api import Page, expect  # noqa: E402


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    (tmp_path / "zoo" / "models").mkdir(parents=True)
    (tmp_path / "zoo" / "clusters").mkdir()
    shutil.copy(DATASETS / "models" / "CTRDNN.json", tmp_path / "zoo" / "models")
    shutil.copy(DATASETS / "clusters" / "HeterPS-2GPU.json", tmp_path / "zoo" / "clusters")
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


def measure_queued(stack: Stack) -> int:
    """Report every queued trial as measured at 0.9x its predicted throughput."""
    n = 0
    with stack.sessions() as s:
        while (claim := repo.claim_trial(s, worker="w", clusters=["HeterPS-2GPU"])) is not None:
            doc = claim.trial.strategy
            thr = 0.9 * doc["predicted"]["throughput"]
            money = doc["samples"] / thr * doc["predicted"]["price_per_hour"] / 3600
            m = Measurement(
                iteration_times=(doc["batch_size"] / thr,) * 3,
                details={"throughput": thr, "money": money, "stages": []},
            )
            repo.report_trial(s, trial_id=claim.trial.id, attempt=claim.attempt, claim_token=claim.claim_token,
                              measurement=m)  # fmt: skip
            n += 1
    return n


def test_the_front_chart_draws_in_a_browser(stack: Stack, browser_page: tuple[Page, list[str]]) -> None:
    pg, errors = browser_page
    with stack.sessions() as session:
        secret = repo.create_token(session, name="alice", role="user").secret
    api = StrategistClient(stack.url, secret)
    sid = api.create_search(
        model="CTRDNN", cluster="HeterPS-2GPU", objective="cost", plan_kind="heterogeneous",
        plan_options={"throughput_limit": 1e5}, trial_budget=3, candidates_per_round=3, samples_per_round=3,
        name="cost-search",
    ).id  # fmt: skip
    deadline = time.monotonic() + 90
    done = 0
    while api.search(sid).search.state != "completed":  # the loop plans; this test measures
        assert time.monotonic() < deadline, f"search not completed within 90 s: {api.search(sid)}"
        done += measure_queued(stack)
        time.sleep(0.3)
    assert done == 5  # AIBox, all-GPU and three candidates
    best = api.costs(sid).best
    assert best is not None and best.trial_id is not None

    pg.goto(stack.url + "/ui/searches")
    pg.fill("[data-testid=token]", secret)
    pg.click("[data-testid=login]")
    pg.wait_for_url("**/ui/searches")
    pg.click("[data-testid=search-link]")
    expect(pg.locator("[data-testid=front-chart] .main-svg").first).to_be_visible()  # plotly drew it
    expect(pg.locator("[data-testid=front-chart] .scatterlayer .point")).to_have_count(10)  # 5 + 5
    expect(pg.locator("[data-testid=plan-row]")).to_have_count(5)
    expect(pg.locator("[data-testid=best-money]")).to_have_text(re.compile(rf"{best.measured_money:.2f} USD"))
    pg.screenshot(path=str(ARTIFACTS / "11-cost-search.png"), full_page=True)
    pg.goto(stack.url + f"/ui/trials/{best.trial_id}")
    expect(pg.locator("[data-testid=plan-stages] tr")).to_have_count(1 + len(best.stages))
    pg.screenshot(path=str(ARTIFACTS / "12-cost-trial.png"), full_page=True)
    assert errors == []
