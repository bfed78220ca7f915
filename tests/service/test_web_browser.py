"""The dashboard in a real headless browser (Debian's chromium driven by Playwright).

A real `Stack` serves the API, the dashboard and the search loop (no worker, so approved trials
stay queued where the test can see them). The test logs in with a token, opens the search, approves
a candidate and sees its trial queued, opens a strategy page, a trial page and the simulator page,
saves a screenshot of each under ``test-artifacts/`` (or $STRATEGIST_ARTIFACTS), and fails on any
JavaScript error or console error.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.client import StrategistClient
from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.settings import Settings
from simulator import zoo
from simulator.spec import domain_name
from tests.service.conftest import ARTIFACTS, CHROMIUM, require_chromium  # type: ignore[import-not-found]

pytestmark = pytest.mark.browser

require_chromium()

from playwright.sync_api import Page, expect  # noqa: E402


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, specs_module: Any) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("web")
    (root / "zoo" / "models").mkdir(parents=True)
    (root / "zoo" / "clusters").mkdir()
    (root / "zoo" / "models" / "tiny-mlp.json").write_text(json.dumps(specs_module.model()))
    (root / "zoo" / "clusters" / "two-node.json").write_text(json.dumps(specs_module.cluster()))
    mp = pytest.MonkeyPatch()
    mp.setenv("STRATEGIST_DATASETS", str(root / "zoo"))
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()
    settings = Settings(
        data_dir=root / "data",
        database_url=f"sqlite:///{root / 'strategist.db'}",
        broker_url="memory://",
        api_host="127.0.0.1",
    )
    with Stack(settings, StackConfig(embedded_worker=False, port=0, tick_s=0.2)) as s:
        yield s
    mp.undo()
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()


@pytest.fixture(scope="module")
def specs_module() -> Any:
    from tests.service.conftest import SpecFactory  # type: ignore[import-not-found]

    return SpecFactory()


@pytest.fixture(scope="module")
def seeded(stack: Stack, specs_module: Any) -> dict[str, Any]:
    """A user, a search that needs approval (round 1 planned by the loop), measured runtimes."""
    with stack.sessions() as session:
        alice = repo.create_token(session, name="alice", role="user")
        bob = repo.create_token(session, name="bob", role="user")
        ops = repo.create_token(session, name="ops", role="admin")
    api = StrategistClient(stack.url, alice.secret)
    sid = api.create_search(
        model="tiny-mlp", cluster="two-node", name="browser-search", trial_budget=4,
        candidates_per_round=2, samples_per_round=40, approval_required=True,
    ).id  # fmt: skip
    deadline = time.monotonic() + 60
    while api.search(sid).search.state != "awaiting_approval":  # poll the condition, 60 s at most
        assert time.monotonic() < deadline, "the loop did not plan round 1 within 60 s"
        time.sleep(0.2)
    # an admin's runtimes: the shared simulators (and the simulators page) see only zoo trials and
    # admin-contributed runtimes, never a user's upload (issue 44)
    admin = StrategistClient(stack.url, ops.secret)
    for i, times in enumerate(([0.30, 0.31, 0.29], [0.20, 0.21, 0.22], [0.45, 0.44, 0.46])):
        admin.upload_runtime(
            model="tiny-mlp", cluster="two-node", strategy=specs_module.strategy(str(i), ps=i == 1),
            iteration_times=times,
        )  # fmt: skip
    with stack.sessions() as session:
        repo.add_simulator_version(
            session, domain=domain_name("tiny-mlp", "two-node"), kind="rnn",
            metrics={"val": {"pairwise_accuracy": 0.8}, "test": {"pairwise_accuracy": 0.75},
                     "analytical_val": {"pairwise_accuracy": 0.6}},
            path=None, n_records=3,
        )  # fmt: skip
    return {"alice": alice.secret, "bob": bob.secret, "search_id": sid}


@pytest.fixture
def page(stack: Stack, browser_page: tuple[Page, list[str]]) -> tuple[Page, list[str]]:
    """The conftest's chromium page, once the module's stack serves."""
    return browser_page


def _login(pg: Page, stack: Stack, token: str) -> None:
    pg.goto(stack.url + "/ui/searches")
    expect(pg).to_have_url(re.compile(r"/ui/login"))
    pg.fill("[data-testid=token]", token)
    pg.click("[data-testid=login]")
    pg.wait_for_url("**/ui/searches")


def _shot(pg: Page, name: str) -> None:
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_review_and_approve_a_candidate(
    stack: Stack, seeded: dict[str, Any], page: tuple[Page, list[str]]
) -> None:
    pg, errors = page
    _login(pg, stack, seeded["alice"])
    expect(pg.locator("[data-testid=whoami]")).to_have_text(re.compile(r"^\s*alice"))
    expect(pg.locator("[data-testid=search-link]")).to_have_count(1)
    _shot(pg, "01-searches")

    pg.click("[data-testid=search-link]")
    # nothing measured yet: the chart says so instead of drawing empty axes (issue 43)
    expect(pg.locator("[data-testid=best-chart-empty]")).to_be_visible()
    expect(pg.locator("[data-testid=search-state]")).to_have_text("awaiting_approval")
    expect(pg.locator("[data-testid=search-title]")).to_contain_text("browser-search")
    _shot(pg, "02-search")

    pg.click("[data-testid=round-link]")
    expect(pg.locator("[data-testid=candidate-row]")).to_have_count(2)
    expect(pg.locator("[data-testid=candidate-status]")).to_have_text(["proposed", "proposed"])
    _shot(pg, "03-round-before")
    pg.locator("[data-testid=approve]").first.click()
    expect(pg.locator("[data-testid=candidate-status]").first).to_have_text("approved")
    expect(pg.locator("[data-testid=candidate-trial-state]")).to_have_text(["queued"])
    _shot(pg, "04-round-approved")

    trials = StrategistClient(stack.url, seeded["alice"]).trials(seeded["search_id"])
    assert [t.state for t in trials if t.candidate_id is not None] == ["queued"]

    pg.locator("[data-testid=strategy-link]").first.click()
    expect(pg.locator("[data-testid=variables] tr").nth(1)).to_be_attached()  # header and >= 1 row
    expect(pg.locator("[data-testid=breakdown] tr")).to_have_count(4)  # header, this strategy, horovod, ps
    _shot(pg, "05-strategy")

    pg.goto(stack.url + "/ui/simulators")
    expect(pg.locator("[data-testid=acc-chart] .main-svg").first).to_be_visible()
    expect(pg.locator("[data-testid=scatter-chart] .main-svg").first).to_be_visible()
    expect(pg.locator("[data-testid=versions]")).to_contain_text(domain_name("tiny-mlp", "two-node"))
    _shot(pg, "06-simulators")

    trial_id = next(t.id for t in trials if t.candidate_id is not None)
    pg.goto(stack.url + f"/ui/trials/{trial_id}")
    expect(pg.locator("[data-testid=trial-state]")).to_have_text("queued")
    _shot(pg, "07-trial")
    assert errors == []


def test_a_user_sees_only_their_own_searches(
    stack: Stack, seeded: dict[str, Any], page: tuple[Page, list[str]]
) -> None:
    pg, errors = page
    _login(pg, stack, seeded["bob"])
    expect(pg.locator("[data-testid=whoami]")).to_have_text(re.compile(r"^\s*bob"))  # the page loaded
    expect(pg.locator("[data-testid=search-link]")).to_have_count(0)
    pg.goto(stack.url + f"/ui/searches/{seeded['search_id']}")
    expect(pg.locator("h1")).to_contain_text("Not found")
    # The only error is the document's own 404 status, which is the point.
    assert errors == [
        "console: Failed to load resource: the server responded with a status of 404 (Not Found)"
    ]


def test_a_bad_token_is_refused(stack: Stack, page: tuple[Page, list[str]]) -> None:
    pg, _ = page
    pg.goto(stack.url + "/ui/login")
    pg.fill("[data-testid=token]", "stg_not-a-token")
    pg.click("[data-testid=login]")
    expect(pg.locator("[data-testid=login-error]")).to_have_text("unknown or revoked token")


def test_chromium_is_the_system_package() -> None:
    assert shutil.which("chromium") == CHROMIUM or Path(CHROMIUM).is_file()
