"""Trial export (issue 43): ``GET /searches/{id}/trials/export?format=csv|json``, the client's
``export_trials``/``export_trials_csv``/``plan_file``, ``strategist search export-trials`` and the
dashboard's links; the same columns for every plan kind, speed-ups against the result's baseline."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from service.cli import app, search_cli_commands
from service.client import ApiError, StrategistClient
from service.db import repository as repo
from service.domain import CandidateDraft
from service.plans.trial_export import COLUMNS

from .helpers import hybrid_search, measured_search, pipeline_search, route_cli


@pytest.fixture
def cli(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    route_cli(monkeypatch, search_cli_commands, client)
    return lambda *args: CliRunner().invoke(app, ["search", *args])


def test_rows_have_the_same_columns_for_every_kind_and_speedups_vs_the_result_baseline(
    plan_zoo: Path, session: Session, user: Any, api: StrategistClient, specs: Any
) -> None:
    uid = user.info.user_id
    pipe, _ = pipeline_search(session, uid, [0.30, 0.142, 0.20])
    hyb, _ = hybrid_search(session, uid, [0.20, 0.25])
    drafts = [
        CandidateDraft(rank=1, strategy=specs.strategy("a", ps=True), predicted_time=0.09, similarity=0.0),
        CandidateDraft(rank=2, strategy=specs.strategy("b"), predicted_time=0.11, similarity=0.0),
    ]
    baselines = {"horovod": specs.strategy("horovod"), "ps": specs.strategy("ps", ps=True)}
    sync = measured_search(session, uid, "tiny-mlp", "two-node", "sync", None, baselines, drafts,
                           [0.12, 0.30, 0.100, 0.1004])  # fmt: skip
    for sid, kind in ((pipe, "pipeline"), (hyb, "hybrid"), (sync, "sync")):
        export = api.export_trials(sid)
        result = api.search(sid).result
        assert result is not None and result.baseline is not None and result.best is not None
        assert export.plan_kind == kind and export.columns == list(COLUMNS)
        assert export.speedup_vs == result.baseline.label
        rows = {r.trial_id: r for r in export.rows}
        assert [r.trial_id for r in export.rows] == sorted(t.id for t in api.trials(sid))
        best = rows[result.best.trial_id]
        assert best.speedup == pytest.approx(result.ratio)  # the same number the result states
        assert best.speedup_low is not None and best.speedup_high is not None
        assert best.speedup_low <= best.speedup <= best.speedup_high
        assert rows[result.baseline.trial_id].speedup == pytest.approx(1.0)
        assert all(r.plan_kind == kind and r.plan and r.status == "succeeded" for r in export.rows)
        assert {r.kind for r in export.rows} == {"baseline", "candidate"}
        assert all(r.round is None for r in export.rows if r.kind == "baseline")
        table = list(csv.reader(io.StringIO(api.export_trials_csv(sid))))
        assert tuple(table[0]) == COLUMNS and len(table) == len(export.rows) + 1
        by_id = {int(r[0]): dict(zip(COLUMNS, r, strict=True)) for r in table[1:]}
        assert float(by_id[best.trial_id]["speedup"]) == pytest.approx(result.ratio)
        assert by_id[result.baseline.trial_id]["round"] == ""  # empty cell, not "None"
    hyb_rows = api.export_trials(hyb)
    assert any(r.speedup is not None and r.speedup < 1 for r in hyb_rows.rows)  # slower than "even"
    sync_rows = {r.trial_id: r for r in api.export_trials(sync).rows}
    assert sorted(r.predicted_s for r in sync_rows.values() if r.kind == "candidate") == [0.09, 0.11]
    assert [r.plan for r in sync_rows.values() if r.baseline == "ps"] == ["3 shards on 1 PS server(s)"]


def test_not_yours_is_404_and_a_bad_format_is_422_naming_it(
    plan_zoo: Path, session: Session, user: Any, api: StrategistClient, client: TestClient
) -> None:
    other = repo.create_token(session, name="mallory", role="user")
    theirs, _ = pipeline_search(session, other.info.user_id, [0.30, 0.142, 0.20])
    with pytest.raises(ApiError) as e:
        api.export_trials(theirs)
    assert e.value.status == 404
    with pytest.raises(ApiError) as e:
        api.export_trials_csv(theirs)
    assert e.value.status == 404
    mine, _ = pipeline_search(session, user.info.user_id, [])  # nothing measured
    r = client.get(
        f"/api/v1/searches/{mine}/trials/export?format=xml",
        headers={"Authorization": f"Bearer {user.secret}"},
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "format"]
    empty = api.export_trials(mine)
    assert empty.speedup_vs is None and all(row.speedup is None for row in empty.rows)
    assert all(row.status == "queued" and row.measured_median_s is None for row in empty.rows)
    ok = client.get(
        f"/api/v1/searches/{mine}/trials/export?format=csv",
        headers={"Authorization": f"Bearer {user.secret}"},
    )
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/csv")
    assert f'filename="search-{mine}-trials.csv"' in ok.headers["content-disposition"]


def test_cli_export_trials_and_dashboard_links(
    plan_zoo: Path, session: Session, user: Any, client: TestClient, cli: Callable[..., Any], tmp_path: Path
) -> None:
    sid, _ = pipeline_search(session, user.info.user_id, [0.30, 0.142, 0.20])
    out = cli("export-trials", str(sid), "--token", user.secret)
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[0] == ",".join(COLUMNS) and len(out.stdout.splitlines()) == 4
    target = tmp_path / "t.json"
    out = cli("export-trials", str(sid), "--format", "json", "-o", str(target), "--token", user.secret)
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == f"wrote {target}: 3 trials of search {sid} (json)"
    doc = json.loads(target.read_text())
    assert doc["columns"] == list(COLUMNS) and doc["speedup_vs"] == "1f1b" and len(doc["rows"]) == 3
    bad = cli("export-trials", str(sid), "--format", "xlsx", "--token", user.secret)
    assert bad.exit_code == 2 and "--format: must be csv or json" in bad.output
    other = repo.create_token(session, name="mallory", role="user")
    missing = cli("export-trials", str(sid), "--token", other.secret)
    assert missing.exit_code == 2 and "HTTP 404" in missing.output
    client.cookies.set("strategist_token", user.secret)
    page = client.get(f"/ui/searches/{sid}").text
    assert f'href="/ui/searches/{sid}/trials/export?format=csv"' in page
    assert f'href="/ui/searches/{sid}/trials/export?format=json"' in page
    got = client.get(f"/ui/searches/{sid}/trials/export?format=csv")
    assert got.status_code == 200 and got.text.splitlines()[0] == ",".join(COLUMNS)
    assert len(client.get(f"/ui/searches/{sid}/trials/export?format=json").json()["rows"]) == 3
    client.cookies.set("strategist_token", other.secret)
    assert client.get(f"/ui/searches/{sid}/trials/export?format=csv").status_code == 404


def test_plan_file_of_a_trial_the_best_and_the_recommended(
    zoo_dir: Path, session: Session, user: Any, api: StrategistClient, specs: Any
) -> None:
    drafts = [
        CandidateDraft(rank=1, strategy=specs.strategy("a", ps=True), predicted_time=0.1, similarity=0.0),
        CandidateDraft(rank=2, strategy=specs.strategy("b"), predicted_time=0.1, similarity=0.0),
    ]
    baselines = {"horovod": specs.strategy("horovod")}
    sid = measured_search(session, user.info.user_id, "tiny-mlp", "two-node", "sync", None, baselines, drafts,
                          [0.12, 0.100, 0.1004])  # fmt: skip
    result = api.search(sid).result
    assert result is not None and result.best is not None and result.recommended is not None
    assert result.recommended.trial_id != result.best.trial_id
    assert api.plan_file(sid).provenance.trial_id == result.best.trial_id
    rec = api.plan_file(sid, recommended=True)
    assert rec.provenance.trial_id == result.recommended.trial_id and rec.kind == "sync"
    assert rec.provenance.iteration_time_s == pytest.approx(0.1004)
    base = next(t for t in api.trials(sid) if t.baseline == "horovod")
    assert api.plan_file(sid, base.id).provenance.trial_id == base.id
    with pytest.raises(ValueError, match="not both"):
        api.plan_file(sid, base.id, recommended=True)
