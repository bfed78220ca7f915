"""Pipeline and hybrid searches end to end: API + loop + a real testbed worker process (issues 17, 19).

Each search asks for one candidate beside its one baseline, on a small zoo model and cluster, with
short trials. Checks what a reader can recompute from the API's answers: every trial succeeded
once, its measurement's details agree with its plan document (the chosen (k, b) is one of the
document's candidates and the switches lead to it; the Gantt rows cover every micro-batch's F and
B on every stage of the last step; the busy time is per device of the plan), and the dashboard
page of the trial shows them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.client import StrategistClient
from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.settings import Settings
from simulator.spec import Plan
from simulator.spec.hybrid import plan_document

# Each search runs two trials of fresh processes (the pipeline's stages or the hybrid plan's GPUs)
# on network namespaces. Measured on the shared 2-core host (2026-11-25): the pipeline test 72 s at
# load 12 and 124 s at load 15 (each pipeline trial starts two torch processes: 17-23 s), so it is
# opt-in (-m slow); the hybrid test 25 s at load 12 (50 s at load 15) stays in the default run.
# The API, loop, worker dispatch and pages without testbed trials: test_plans_pipeline_hybrid.py.

WORKER_FLAGS = {"iterations": 3, "warmup": 1, "heartbeat": 0.5, "poll": 0.5, "clusters": "pp-2,mixed-2"}


@pytest.fixture
def stack(tmp_path: Path, plan_zoo: Path) -> Iterator[Stack]:
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url="",
        broker_url="",
        heartbeat_timeout_s=20.0,
        sweep_interval_s=1.0,
    )
    with Stack(settings, StackConfig(worker_flags=WORKER_FLAGS, port=0, tick_s=0.3)) as s:
        yield s


def user_client(stack: Stack) -> tuple[StrategistClient, str]:
    with stack.sessions() as session:
        secret = repo.create_token(session, name="alice", role="user").secret
    return StrategistClient(stack.url, secret), secret


def finished(client: StrategistClient, sid: int) -> list[dict[str, Any]]:
    status = client.wait(sid, interval_s=0.5, timeout_s=240)
    assert status.search.state == "completed", status.search.failure_reason
    trials = [t.model_dump(mode="json") for t in client.trials(sid)]
    for t in trials:
        assert t["state"] == "succeeded" and t["attempt"] == 1, (t["id"], t["failure_reason"])
        assert len(t["iteration_times"]) == WORKER_FLAGS["iterations"]
    return trials


@pytest.mark.slow  # 72-124 s on the shared host (see above)
def test_pipeline_search_runs_end_to_end_with_tuner_trials_on_the_testbed(stack: Stack) -> None:
    client, secret = user_client(stack)
    sid = client.create_search(
        model="pp-chain",
        cluster="pp-2",
        plan_kind="pipeline",
        plan_options={"stages": 2, "memory_per_device_gb": 0.004},
        trial_budget=1,
        candidates_per_round=1,
        samples_per_round=1,
    ).id
    trials = finished(client, sid)
    assert sorted(t["baseline"] or "candidate" for t in trials) == ["1f1b", "candidate"]
    cand = next(t for t in trials if t["candidate_id"] is not None)
    base = next(t for t in trials if t["baseline"] == "1f1b")
    status = client.search(sid)
    assert status.best_trial_id == cand["id"]
    assert status.speedups == {"1f1b": pytest.approx(base["median_time"] / cand["median_time"])}
    doc, details = cand["strategy"], cand["measurement"]["details"]
    plans = [Plan.model_validate(p) for p in doc["candidates"]]
    assert len(plans) >= 2 and doc["adaptive"] is True  # a memory curve to tune over
    assert all(len(p.stages) == 2 for p in plans)
    # the chosen (k, b) is a candidate of the document, reached from the start by the logged switches
    at = doc["start"]
    assert details["start"]["candidate"] == at
    for sw in details["switches"]:
        assert sw["from"]["b"] == plans[at].micro_batch_size
        at = next(i for i, p in enumerate(plans) if p.micro_batch_size == sw["to"]["b"])
    chosen = plans[details["chosen"]["candidate"]]
    assert details["chosen"]["candidate"] == at
    assert details["chosen"]["b"] == chosen.micro_batch_size
    assert details["chosen"]["k"] == chosen.group_size(chosen.replica_micro_batches(0))
    assert [s[0] for s in details["steps"]][-1] == at
    # Gantt: every micro-batch's F and B on both stages in the last step, each within the step
    gantt = details["gantt"]
    n = chosen.replica_micro_batches(0)
    assert gantt["stages"] == 2 and gantt["replicas"] == 1
    assert sorted((r[1], r[2], r[3]) for r in gantt["rows"]) == sorted(
        (s, kind, mb) for s in range(2) for kind in "FB" for mb in range(n)
    )
    assert all(0 <= r[4] <= r[5] <= gantt["seconds"] + 1e-6 for r in gantt["rows"])
    # the baseline ran fixed 1F1B: no tuner
    assert base["strategy"]["adaptive"] is False
    assert (
        base["measurement"]["details"]["chosen"]["k"] == 1
        and base["measurement"]["details"]["switches"] == []
    )
    # the dashboard's trial page draws the Gantt and lists the switches
    page = httpx.get(f"{stack.url}/ui/trials/{cand['id']}", cookies={"strategist_token": secret})
    assert page.status_code == 200
    assert "<svg" in page.text and f"k={details['chosen']['k']}" in page.text
    assert page.text.count('class="gantt-f"') == n * 2


def test_hybrid_search_on_mixed_gpus_runs_end_to_end_with_testbed_trials(stack: Stack) -> None:
    client, secret = user_client(stack)
    sid = client.create_search(
        model="mixed-net",
        cluster="mixed-2",
        plan_kind="hybrid",
        plan_options={"annotations": {"features": {"primitive": "replicate"}}, "global_batch": 32},
        trial_budget=1,
        candidates_per_round=1,
        samples_per_round=1,
    ).id
    trials = finished(client, sid)
    assert sorted(t["baseline"] or "candidate" for t in trials) == ["candidate", "even"]
    cand = next(t for t in trials if t["candidate_id"] is not None)
    even_median = next(t["median_time"] for t in trials if t["baseline"] == "even")
    assert client.search(sid).speedups == {"even": pytest.approx(even_median / cand["median_time"])}
    plan, carried = plan_document(cand["strategy"])
    assert carried == ()  # ranked with the (empty) stored profiles, and replayed with them
    # the best predicted annotated plan on V100 + P100 is Algorithm 1's: more samples on the V100
    shares = plan.device_shares(0)
    assert plan.name == "annotated (Algorithm 1 shares)" and shares["n0:0"] > shares["n1:0"]
    assert sum(shares.values()) == 32
    busy = cand["measurement"]["details"]["busy_s"]
    assert set(busy) == {"n0:0", "n1:0"} and all(t > 0 for t in busy.values())
    even = next(t for t in trials if t["baseline"] == "even")
    assert plan_document(even["strategy"])[0].device_shares(0) == {"n0:0": 16, "n1:0": 16}
    page = httpx.get(f"{stack.url}/ui/trials/{cand['id']}", cookies={"strategist_token": secret})
    assert page.status_code == 200
    for dev in ("n0:0", "n1:0"):
        assert dev in page.text
    assert f"{shares['n0:0']}" in page.text and "busy" in page.text
