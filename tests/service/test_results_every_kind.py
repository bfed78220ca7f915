"""One result shape for every plan kind (issue 43): ``GET /searches/{id}.result``, ``best_plan``,
``best_strategy``, ``strategist search status|watch`` on sync, pipeline and hybrid searches, and the
simplest-within-noise rule on hand-made measurements. (Heterogeneous: test_heterogeneous_search.py.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from runtime.worker.plan_pipeline import PipelineTrial
from service.cli import app, search_cli_commands
from service.client import StrategistClient
from service.db import repository as repo
from service.domain import CandidateDraft, Trial
from service.plans.results import NOISE_FLOOR, complexity, recommend, within_noise
from simulator.spec import HybridPlan, Strategy

from .helpers import hybrid_search, measured_search, pipeline_search, route_cli

# ------------------------------------------------------------------ the rule, by hand


def trial(tid: int, doc: dict[str, Any], times: Sequence[float]) -> Trial:
    now = datetime.now(UTC)
    med = sorted(times)[len(times) // 2]
    return Trial(
        id=tid, search_id=1, round_index=1, candidate_id=tid, baseline=None, cluster_name="c",
        strategy=doc, predicted_time=None, state="succeeded", attempt=1, claimed_by="w",
        heartbeat_at=None, stop_requested=False, failure_reason=None, iteration_times=tuple(times),
        median_time=med, measurement=None, created_at=now, started_at=now, finished_at=now,
    )  # fmt: skip


def ps_strategy(servers: int, variables: int = 67) -> dict[str, Any]:
    """67 variables on ``servers`` PS servers (one shard each)."""
    return {
        "kind": "strategy",
        "variables": [
            {"variable": f"v{i}", "shards": [{"kind": "ps", "server": f"n{i % servers}"}]}
            for i in range(variables)
        ],
    }


def allreduce(groups: int = 1, variables: int = 67) -> dict[str, Any]:
    return {
        "kind": "strategy",
        "variables": [
            {"variable": f"v{i}", "shards": [{"kind": "collective", "group": i % groups}]}
            for i in range(variables)
        ],
    }


NOISY = (-0.02, -0.01, 0.0, 0.01, 0.02)  # +-2 % iteration-to-iteration spread


def spread(median: float, rel: Sequence[float] = NOISY) -> list[float]:
    return [median * (1 + r) for r in rel]


def test_the_simplest_plan_within_the_noise_of_the_best_is_recommended() -> None:
    """The issue's case: a 67-shard PS plan wins by 0.5 %, inside the +-2 % noise; one all-reduce
    group is recommended. An all-reduce as simple but 5 % slower is outside the noise and never recommended."""
    best = trial(1, ps_strategy(servers=8), spread(1.000))
    simple = trial(2, allreduce(groups=1), spread(1.005))
    busier = trial(3, allreduce(groups=4), spread(1.002))
    slow_simplest = trial(4, allreduce(groups=1, variables=1), spread(1.05))
    assert complexity(simple.strategy) < complexity(busier.strategy) < complexity(best.strategy)
    assert complexity(slow_simplest.strategy) <= complexity(simple.strategy)
    pick, reason = recommend([best, simple, busier, slow_simplest])
    assert pick is simple
    assert "trial 2 is +0.5% from the fastest (trial 1), within the measurement noise" in reason
    assert not within_noise(slow_simplest.iteration_times, best.iteration_times)


def test_a_clear_win_or_no_spread_keeps_the_best() -> None:
    best = trial(1, ps_strategy(servers=8), spread(1.00))
    simple = trial(2, allreduce(), spread(1.10))  # 10 % slower: outside any noise
    assert recommend([best, simple])[0] is best
    # one iteration each: no bootstrap spread, only the floor (1 %) decides
    one = trial(5, ps_strategy(servers=8), [1.0])
    near = trial(6, allreduce(), [1.0 + NOISE_FLOOR / 2])
    far = trial(7, allreduce(), [1.0 + 2 * NOISE_FLOOR])
    assert recommend([one, near])[0] is near
    assert recommend([one, far])[0] is one
    assert recommend([]) == (None, "no measured candidate yet")


# ------------------------------------------------------------------ every kind through the API


@pytest.fixture
def cli(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    route_cli(monkeypatch, search_cli_commands, client)
    return lambda *args: CliRunner().invoke(app, ["search", *args])


def test_pipeline_status_best_plan_and_cli(
    plan_zoo: Path, session: Session, user: Any, api: StrategistClient, cli: Callable[..., Any]
) -> None:
    sid, _ = pipeline_search(session, user.info.user_id, [0.30, 0.142, 0.20])
    st = api.search(sid)
    r = st.result
    assert r is not None and r.plan_kind == "pipeline" and r.metric == "time"
    assert r.best is not None and r.best.trial_id == st.best_trial_id and r.best.value == pytest.approx(0.142)
    assert r.baseline is not None and r.baseline.label == "1f1b"
    assert r.ratio == pytest.approx(0.30 / 0.142) and not r.slower
    assert r.ratio == pytest.approx(st.speedups["1f1b"])
    assert r.verdict.startswith("2.11x speed-up vs 1f1b")
    plan = api.best_plan(sid)
    assert isinstance(plan, PipelineTrial)
    assert plan.model_dump(mode="json") == api.trial(r.best.trial_id).strategy
    with pytest.raises(ValueError, match=r"pipeline search.*best_plan"):
        api.best_strategy(sid)
    out = cli("status", str(sid), "--token", user.secret)
    assert out.exit_code == 0, out.output
    assert "result (pipeline): 2.11x speed-up vs 1f1b" in out.stdout


def test_hybrid_slower_than_its_baseline_is_flagged(
    plan_zoo: Path,
    session: Session,
    user: Any,
    api: StrategistClient,
    cli: Callable[..., Any],
    client: TestClient,
) -> None:
    sid, drafts = hybrid_search(session, user.info.user_id, [0.20, 0.25])
    r = api.search(sid).result
    assert r is not None and r.baseline is not None and r.ratio == pytest.approx(0.8) and r.slower
    assert "slower than its baseline; keep even" in r.verdict
    plan = api.best_plan(sid)
    assert isinstance(plan, HybridPlan) and plan.name == HybridPlan.model_validate(drafts[0].strategy).name
    out = cli("status", str(sid), "--token", user.secret)
    assert out.exit_code == 0, out.output
    assert "0.80x speed-up vs even: slower than its baseline; keep even" in out.stdout
    client.cookies.set("strategist_token", user.secret)
    page = client.get(f"/ui/searches/{sid}").text
    assert 'data-testid="result-ratio">0.80×' in page and "keep even" in page
    listing = client.get("/ui/searches").text
    assert 'data-testid="slower"' in listing and "0.80× vs even" in listing


def test_sync_result_compares_with_the_strongest_tuned_baseline(
    zoo_dir: Path, session: Session, user: Any, api: StrategistClient, cli: Callable[..., Any], specs: Any
) -> None:
    drafts = [
        CandidateDraft(rank=1, strategy=specs.strategy("a", ps=True), predicted_time=0.1, similarity=0.0),
        CandidateDraft(rank=2, strategy=specs.strategy("b"), predicted_time=0.1, similarity=0.0),
    ]
    baselines = {"horovod": specs.strategy("horovod"), "ps": specs.strategy("ps", ps=True)}
    # horovod 0.12, ps 0.30; PS candidate 0.100, all-reduce candidate 0.1004 (within noise, simpler)
    sid = measured_search(session, user.info.user_id, "tiny-mlp", "two-node", "sync", None, baselines, drafts,
                          [0.12, 0.30, 0.100, 0.1004])  # fmt: skip
    st = api.search(sid)
    r = st.result
    assert r is not None and r.best is not None and r.best.value == pytest.approx(0.100)
    assert r.baseline is not None and r.baseline.label == "horovod"
    assert r.ratio == pytest.approx(st.speedups["horovod"])
    assert r.recommended is not None and r.recommended.value == pytest.approx(0.1004)
    assert r.recommended.description == "3 shards all-reduce in 1 group(s)"
    best = api.best_plan(sid)
    assert isinstance(best, Strategy) and best == api.best_strategy(sid)
    assert isinstance(api.best_plan(sid, recommended=True), Strategy)
    out = cli("status", str(sid), "--token", user.secret)
    assert out.exit_code == 0, out.output
    assert "result (sync): 1.20x speed-up vs horovod" in out.stdout
    assert f"recommended: trial:{r.recommended.trial_id}" in out.stdout


def test_cancelled_search_reads_as_cancelled(
    zoo_dir: Path,
    session: Session,
    user: Any,
    api: StrategistClient,
    cli: Callable[..., Any],
    client: TestClient,
    specs: Any,
) -> None:
    sid = api.create_search(model="tiny-mlp", cluster="two-node", trial_budget=4).id
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("h"), baseline="horovod")
    api.cancel(sid)
    out = cli("status", str(sid), "--token", user.secret)
    assert (
        out.exit_code == 0 and "cancelled after 0 of 4 candidate trials; the rest will not run" in out.stdout
    )
    piped = cli("watch", str(sid), "--interval", "0.05", "--token", user.secret)
    assert (
        piped.exit_code == 0 and f"search {sid} cancelled round 0: 0/4 candidate trials done" in piped.stdout
    )
    client.cookies.set("strategist_token", user.secret)
    page = client.get(f"/ui/searches/{sid}").text
    assert 'data-testid="ended">Cancelled' in page and "the rest will not run" in page
    assert "not measured (search cancelled)" in page and " queued<" not in page  # no stale "1 queued"
