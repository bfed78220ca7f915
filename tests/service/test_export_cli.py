"""`strategist export`: the search's best measured trial (or --trial) as a plan file, over HTTP through
StrategistClient against the real app in process; what cannot be exported is one line, exit 2."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from service.cli import app, export_commands
from service.db import repository as repo
from service.domain import CandidateDraft
from simulator.spec import Strategy
from simulator.spec.measurement import Measurement
from simulator.spec.planfile import read_plan_file

from .helpers import route_cli

API = "/api/v1"
CREATE = {"model": "tiny-mlp", "cluster": "two-node", "trial_budget": 4, "candidates_per_round": 2}


@pytest.fixture
def export(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Any:
    route_cli(monkeypatch, export_commands, client)
    return lambda *args: CliRunner().invoke(app, ["export", *args])


def _finish(session: Session, median: float) -> int:
    claim = repo.claim_trial(session, worker="w", clusters=["two-node"])
    assert claim is not None
    repo.report_trial(
        session,
        trial_id=claim.trial.id,
        attempt=claim.attempt,
        claim_token=claim.claim_token,
        measurement=Measurement(iteration_times=(median, median)),
    )
    return claim.trial.id


def test_export_writes_the_best_trial_then_any_trial(
    export: Any, client: TestClient, tokens: dict[str, Any], session: Session, specs: Any, tmp_path: Any
) -> None:
    secret = tokens["alice"]["Authorization"].removeprefix("Bearer ")
    sid = client.post(f"{API}/searches", json=CREATE, headers=tokens["alice"]).json()["id"]
    r = export("--search", str(sid), "-o", str(tmp_path / "p.json"), "--token", secret)
    assert (
        r.exit_code == 2
        and r.output.strip() == f"error: --search: search {sid} has no measured candidate yet (state pending)"
    )

    repo.transition_search(session, search_id=sid, from_states=["pending"], to_state="running")
    drafts = [
        CandidateDraft(rank=1, strategy=specs.strategy("a"), predicted_time=0.25, similarity=0.5),
        CandidateDraft(rank=2, strategy=specs.strategy("b", ps=True), predicted_time=0.35, similarity=0.2),
    ]
    repo.add_round(session, search_id=sid, candidates=drafts, samples=200)
    slow = _finish(session, 0.5)
    fast = _finish(session, 0.3)

    r = export("--search", str(sid), "-o", str(tmp_path / "best.json"), "--token", secret)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == (f"wrote {tmp_path / 'best.json'}: sync plan of trial {fast} for tiny-mlp "
                                "on 2 processes, measured 0.3 s/iteration")  # fmt: skip
    best = read_plan_file(tmp_path / "best.json")
    assert (best.kind, best.world_size, best.model) == ("sync", 2, "tiny-mlp")
    assert best.strategy() == Strategy.model_validate(specs.strategy("b", ps=True))
    assert [(v.name, v.shape) for v in best.variables] == [
        ("fc1.weight", (64, 32)), ("fc1.bias", (32,)), ("fc2.weight", (32, 10))
    ]  # fmt: skip
    assert (best.provenance.search_id, best.provenance.trial_id, best.provenance.iteration_time_s) == (
        sid,
        fast,
        0.3,
    )

    r = export("--search", str(sid), "--trial", str(slow), "-o", str(tmp_path / "t.json"), "--token", secret)
    assert r.exit_code == 0, r.output
    assert read_plan_file(tmp_path / "t.json").strategy() == Strategy.model_validate(specs.strategy("a"))


def test_export_errors_are_one_line(
    export: Any, client: TestClient, tokens: dict[str, Any], tmp_path: Any
) -> None:
    secret = tokens["bob"]["Authorization"].removeprefix("Bearer ")
    r = export("--search", "999", "-o", str(tmp_path / "p.json"), "--token", secret)
    assert r.exit_code == 2 and r.output.strip().startswith("error: ") and "no search 999" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = export("--search", "1", "-o", str(tmp_path / "p.json"))
    assert r.exit_code == 2 and "--token" in r.output
