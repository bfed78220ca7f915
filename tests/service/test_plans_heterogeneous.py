"""The heterogeneous plan kind's parts: the front, the walk up it, exhaustion, and the loop ending there."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from search.heterogeneous import ExactScheduler
from service.db import repository as repo
from service.loop import SearchLoop
from service.plans import RoundAsk, plan_kind
from service.plans.heterogeneous import HeterogeneousOptions, at_limit, cost_model, front_walk
from service.plans.heterogeneous_results import front
from simulator import zoo
from simulator.spec.measurement import Measurement

DATASETS = Path(__file__).resolve().parents[2] / "datasets"
WAIT = 120.0


def test_front_keeps_exactly_the_undominated_points() -> None:
    # (throughput, money): (2, 2) is dominated by (3, 2), (2, 3) by (2, 2), (0.5, 5) by (1, 1)
    points = [(1.0, 1.0), (2.0, 2.0), (2.0, 3.0), (3.0, 2.0), (0.5, 5.0), (3.0, 2.0)]
    assert front(points) == [True, False, False, True, False, True]  # equal points do not dominate
    assert front([]) == []


def test_the_walk_takes_the_cheapest_plan_at_each_level_until_none_reaches_the_next() -> None:
    opts = HeterogeneousOptions(throughput_limit=1e5)
    cm = cost_model(zoo.model("CTRDNN"), zoo.cluster("HeterPS-2GPU"), opts)
    docs = front_walk(cm, opts, 100, set(), seed=0)
    assert len(docs) >= 3
    exact = ExactScheduler()
    level = opts.throughput_limit
    for doc in docs:
        best = exact.schedule(at_limit(cm, level))
        assert doc.predicted.money == pytest.approx(best.money, rel=1e-9)
        assert doc.predicted.throughput >= level
        level = doc.predicted.throughput * (1 + opts.front_step)
    assert not exact.schedule(at_limit(cm, level)).feasible  # the walk stopped at the top
    for a, b in itertools.pairwise(docs):  # faster by the step, and dearer
        assert (
            b.predicted.throughput >= a.predicted.throughput * 1.1 and b.predicted.money > a.predicted.money
        )
    # already tried plans are skipped, the walk goes on past them; with all tried, nothing is left
    kind = plan_kind("heterogeneous")
    assert kind is not None
    options = opts.model_dump(mode="json")
    tried = tuple(d.model_dump(mode="json") for d in docs[:2])
    later = kind.plan_round(cm.model, cm.cluster, options, RoundAsk(index=2, k=2, seed=0, tried=tried))
    assert [d.strategy["plan"] for d in later.drafts] == [d.plan.model_dump(mode="json") for d in docs[2:4]]
    assert [d.rank for d in later.drafts] == list(range(1, len(docs[2:4]) + 1))
    everything = tuple(d.model_dump(mode="json") for d in docs)
    assert kind.plan_round(cm.model, cm.cluster, options, RoundAsk(3, 4, 0, everything)).drafts == ()


def test_other_schedulers_propose_through_the_same_walk() -> None:
    kind = plan_kind("heterogeneous")
    assert kind is not None
    model, cluster = zoo.model("CTRDNN"), zoo.cluster("HeterPS-2GPU")
    for name in ("greedy", "aibox", "all-gpu"):
        options = kind.validate(
            {"throughput_limit": 1e5, "scheduler": name}, objective="cost", model=model, cluster=cluster
        )
        planned = kind.plan_round(model, cluster, options, RoundAsk(index=1, k=2, seed=0, tried=()))
        # a heuristic may find nothing at the next level up (the walk then ends): at least the first
        assert planned.scorer == f"heterps-{name}" and 1 <= len(planned.drafts) <= 2
        assert all(d.strategy["scheduler"] == name for d in planned.drafts)
        assert planned.drafts[0].strategy["predicted"]["throughput"] >= 1e5


def test_the_loop_completes_a_search_when_its_front_is_exhausted(
    heterps_zoo: Path, sessions: sessionmaker[Session]
) -> None:
    kind = plan_kind("heterogeneous")
    assert kind is not None
    with sessions() as s:
        owner = repo.create_token(s, name="alice", role="user").info.user_id
        model = repo.zoo_spec(s, kind="model", name="CTRDNN")
        cluster = repo.zoo_spec(s, kind="cluster", name="HeterPS-2GPU")
        options = kind.validate(
            {"throughput_limit": 1e5, "front_step": 0.5, "baselines": []},
            objective="cost",
            model=model.model_spec(),
            cluster=cluster.cluster_spec(),
        )
        search = repo.create_search(s, owner_id=owner, model=model, cluster=cluster, objective="cost",
                                    trial_budget=50, candidates_per_round=2, samples_per_round=2,
                                    plan_kind="heterogeneous", plan_options=options)  # fmt: skip
    loop = SearchLoop(sessions)
    steps = []
    for _ in range(20):
        steps.append(loop.advance(search.id, wait_s=WAIT))
        with sessions() as s:
            while (claim := repo.claim_trial(s, worker="w", clusters=["HeterPS-2GPU"])) is not None:
                m = Measurement(iteration_times=(0.01,), details={"throughput": 2e5, "money": 30.0})
                repo.report_trial(s, trial_id=claim.trial.id, attempt=claim.attempt,
                                  claim_token=claim.claim_token, measurement=m)  # fmt: skip
        if steps[-1] == "completed":
            break
    assert steps[-1] == "completed", steps
    with sessions() as s:
        trials = repo.list_trials(s, search_id=search.id)
        rounds = repo.list_rounds(s, search_id=search.id)
    opts = HeterogeneousOptions.model_validate(options)
    walk = front_walk(cost_model(model.model_spec(), cluster.cluster_spec(), opts), opts, 100, set(), seed=0)
    assert len(trials) == len(walk) < 50  # every plan of the front once, then no more rounds
    assert [r.state for r in rounds] == ["completed"] * len(rounds) and len(rounds) == -(-len(walk) // 2)
    assert "retraining" not in steps


def test_the_runner_takes_the_workers_options_and_reports_a_failed_run_as_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from runtime.heterogeneous import HeterogeneousRun
    from runtime.worker.plan_heterogeneous import HeterogeneousPlan, measure_config, run

    kind = plan_kind("heterogeneous")
    assert kind is not None
    model, cluster = zoo.model("CTRDNN"), zoo.cluster("HeterPS-2GPU")
    options = kind.validate(
        {"throughput_limit": 1e5, "epochs": 3}, objective="cost", model=model, cluster=cluster
    )
    doc = (
        kind.plan_round(model, cluster, options, RoundAsk(index=1, k=1, seed=0, tried=())).drafts[0].strategy
    )
    worker = {"pool": "testbed", "iterations": 5, "warmup": 2, "timeout_s": 30.0, "compute": "replay",
              "heterogeneous_testbed": False}  # fmt: skip
    config = measure_config(HeterogeneousPlan.model_validate(doc), worker)
    assert (config.iterations, config.warmup, config.timeout_s, config.testbed) == (5, 2, 30.0, False)
    assert config.workload.batch_size == 2048 and config.workload.throughput_limit == 1e5
    assert config.workload.samples == 3e9  # the money is for every epoch
    seen = []

    def failing(*args: object, config: object) -> HeterogeneousRun:
        seen.append(config)
        return HeterogeneousRun(status="failed", reason="stage 1 group 0 failed (exit 1): boom")

    monkeypatch.setattr("runtime.heterogeneous.measure_plan", failing)
    m = run(doc, SimpleNamespace(model=model, cluster=cluster, options=worker))  # type: ignore[arg-type]
    assert not m.ok and m.failure == "stage 1 group 0 failed (exit 1): boom"
    assert m.environment["throughput_limit"] == 1e5 and m.environment["shaped"] is False
    assert seen == [config]
