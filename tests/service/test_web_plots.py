"""Plots a person would rather look at (issue 43): predicted vs measured on each search page (seconds
on both axes, the y = x line, the median measured/predicted ratio, an empty state), the simulators
page's accuracy chart with a server-side empty state, and (k, b) explained on pipeline pages and in
the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from service.cli import app, search_cli_commands
from service.db import repository as repo
from service.domain import CandidateDraft, Trial
from service.plans.base import RoundAsk
from service.plans.pipeline import KB_MEANING, PipelinePlans
from service.web.views import predicted_vs_measured
from simulator import zoo
from simulator.spec.measurement import Measurement

from .helpers import measured_search, measured_trial, route_cli, tiny_search


def trial(tid: int, predicted: float | None, median: float | None, state: str = "succeeded",
          baseline: str | None = None) -> Trial:  # fmt: skip
    now = datetime.now(UTC)
    return Trial(
        id=tid, search_id=1, round_index=None if baseline else 1, candidate_id=None if baseline else tid,
        baseline=baseline, cluster_name="c", strategy={}, predicted_time=predicted, state=state,  # type: ignore[arg-type]
        attempt=1, claimed_by="w", heartbeat_at=None, stop_requested=False, failure_reason=None,
        iteration_times=(median,) if median else (), median_time=median, measurement=None,
        created_at=now, started_at=now, finished_at=now,
    )  # fmt: skip


def test_predicted_vs_measured_points_and_median_ratio() -> None:
    pvm = predicted_vs_measured(
        [
            trial(3, 0.10, 0.20),  # ratio 2.0
            trial(1, 0.10, 0.10),  # 1.0
            trial(2, 0.20, 0.30),  # 1.5
            trial(4, 0.10, 0.40),  # 4.0
            trial(5, None, 0.12, baseline="horovod"),  # no prediction: not a point
            trial(6, 0.10, None, state="failed"),  # no measurement: not a point
            trial(7, 0.10, None, state="queued"),
        ]
    )
    assert pvm.trial_ids == (1, 2, 3, 4) and pvm.labels == ("candidate",) * 4
    assert pvm.predicted == (0.10, 0.20, 0.10, 0.10) and pvm.measured == (0.10, 0.30, 0.20, 0.40)
    assert pvm.ratio == pytest.approx(1.75)  # median of 1.0, 1.5, 2.0, 4.0
    assert predicted_vs_measured([trial(1, 0.2, 0.1), trial(2, 0.1, 0.1), trial(8, 0.1, 0.3)]).ratio == 1.0
    empty = predicted_vs_measured([trial(5, None, 0.12, baseline="ps"), trial(6, 0.1, None, "failed")])
    assert empty.empty and empty.ratio is None


def measure(session: Session, cluster: str, medians: Sequence[float]) -> None:
    for med in medians:
        claim = repo.claim_trial(session, worker="w", clusters=[cluster])
        assert claim is not None
        m = Measurement(iteration_times=(med * 0.99, med, med * 1.01))
        repo.report_trial(
            session, trial_id=claim.trial.id, attempt=1, claim_token=claim.claim_token, measurement=m
        )


def test_search_page_plots_predicted_vs_measured_or_says_there_is_nothing(
    zoo_dir: Path, session: Session, client: TestClient, specs: Any
) -> None:
    user, search = tiny_search(session, "erin")
    repo.enqueue_trial(session, search_id=search.id, strategy=specs.strategy("horovod"), baseline="horovod")
    drafts = [
        CandidateDraft(rank=1, strategy=specs.strategy("a", ps=True), predicted_time=0.08, similarity=0.0),
        CandidateDraft(rank=2, strategy=specs.strategy("b"), predicted_time=0.10, similarity=0.0),
    ]
    repo.add_round(session, search_id=search.id, candidates=drafts, samples=2)
    client.cookies.set("strategist_token", user.secret)
    before = client.get(f"/ui/searches/{search.id}").text
    assert 'data-testid="pvm-empty"' in before and 'id="pvm-chart"' not in before
    assert "both in seconds" in before
    measure(session, "two-node", [0.12])  # the baseline: no prediction, still no point
    assert 'data-testid="pvm-empty"' in client.get(f"/ui/searches/{search.id}").text
    measure(session, "two-node", [0.10, 0.15])  # ratios 1.25 and 1.5: median 1.375
    page = client.get(f"/ui/searches/{search.id}").text
    assert 'data-testid="pvm-empty"' not in page and 'id="pvm-chart"' in page
    assert "Median measured / predicted over 2 trials: <b>1.38×</b> (trials ran slower than predicted" in page
    assert '"predicted": [0.08, 0.1]' in page and '"measured": [0.1, 0.15]' in page
    assert "predicted iteration time (s)" in page and "measured median iteration time (s)" in page
    assert "y = x" in page


def test_simulators_accuracy_chart_has_a_server_side_empty_state(
    session: Session, client: TestClient
) -> None:
    user = repo.create_token(session, name="erin", role="user")
    client.cookies.set("strategist_token", user.secret)
    repo.add_simulator_version(session, domain="m__c", kind="gnn", metrics={}, path=None, n_records=3)
    page = client.get("/ui/simulators").text
    assert 'data-testid="acc-empty"' in page and 'id="acc-chart"' not in page and 'id="acc-data"' not in page
    repo.add_simulator_version(
        session,
        domain="m__c",
        kind="gnn",
        metrics={"val": {"pairwise_accuracy": 0.8}},
        path=None,
        n_records=9,
    )
    page = client.get("/ui/simulators").text
    assert 'id="acc-chart"' in page and 'data-testid="acc-empty"' not in page
    assert "pairwise ranking accuracy (0-1)" in page


def test_kb_is_explained_on_pipeline_pages_and_in_the_cli(
    plan_zoo: Path, session: Session, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "§2.5" in KB_MEANING and "k = 1 is 1F1B" in KB_MEANING and "micro-batch size" in KB_MEANING
    user = repo.create_token(session, name="erin", role="user")
    model, cluster = zoo.model("pp-chain"), zoo.cluster("pp-2")
    kind = PipelinePlans()
    options = kind.validate({"memory_per_device_gb": 0.0039}, objective="time", model=model, cluster=cluster)
    drafts = kind.plan_round(model, cluster, options, RoundAsk(1, 1, 0, ())).drafts[:1]
    sid = measured_search(
        session, user.info.user_id, "pp-chain", "pp-2", "pipeline", options, {}, drafts, [0.2]
    )
    cand = repo.list_candidates(session, search_id=sid, round_index=1, owner_id=user.info.user_id)[0]
    tid = repo.list_trials(session, search_id=sid, owner_id=user.info.user_id)[0].id
    client.cookies.set("strategist_token", user.secret)
    for url in (f"/ui/candidates/{cand.id}", f"/ui/trials/{tid}"):
        page = client.get(url).text
        assert 'data-testid="kb-meaning"' in page and "k = N is GPipe" in page, url
    route_cli(monkeypatch, search_cli_commands, client)
    out = CliRunner().invoke(app, ["search", "status", str(sid), "--token", user.secret])
    assert out.exit_code == 0, out.output
    assert KB_MEANING in " ".join(out.stdout.split())


def test_trial_page_prints_the_scale_to_three_digits_and_labels_the_prediction(
    zoo_dir: Path, session: Session, client: TestClient, specs: Any
) -> None:
    """The issue saw 'a scale of 8.333333333333334' and a prediction line without a label."""
    m = Measurement(iteration_times=(0.1, 0.1, 0.1), scale=25 / 3)
    user, trial_id = measured_trial(session, specs, "erin", m)
    client.cookies.set("strategist_token", user.secret)
    page = client.get(f"/ui/trials/{trial_id}").text
    assert 'data-testid="scale"' in page and ">8.33× · replay" in page and "8.333333" not in page
    assert '"predicted": 0.08' in page and '"predicted " + (d.predicted * 1000).toFixed(1) + " ms"' in page
