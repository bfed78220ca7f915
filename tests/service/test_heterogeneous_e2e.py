"""A cost-objective search with real measured trials: API + loop + a real worker running measure_plan.

``strategist serve``'s stack (API, loop, embedded queue, one testbed worker process) on CTRDNN and
HeterPS-2GPU with a limit of 100,000 samples/s: the AIBox and all-GPU baselines and one round of
two plans from the front are measured by ``runtime.heterogeneous.measure_plan`` (stage processes
on shaped namespaces where this host allows them, else unshaped loopback, as the measurement's
environment says). Checks what a reader can recompute from the answers: each measured money is
Formula 8 at the measured throughput, each trial's iteration times are B / its per-iteration
throughputs, and the search's best is the cheapest measured plan meeting the limit.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.client import StrategistClient
from service.db import repository as repo
from service.loop.stack import Stack, StackConfig
from service.settings import Settings
from simulator import zoo

pytestmark = pytest.mark.slow

DATASETS = Path(__file__).resolve().parents[2] / "datasets"
ITERATIONS, WARMUP = 4, 1
WORKER_FLAGS = {
    "iterations": ITERATIONS,
    "warmup": WARMUP,
    "heartbeat": 0.5,
    "poll": 0.5,
    "clusters": "HeterPS-2GPU",
}


@pytest.fixture
def stack(tmp_path: Path, zoo_dir: Path) -> Iterator[Stack]:
    shutil.copy(DATASETS / "models" / "CTRDNN.json", zoo_dir / "models")
    shutil.copy(DATASETS / "clusters" / "HeterPS-2GPU.json", zoo_dir / "clusters")
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url="",
        broker_url="",
        heartbeat_timeout_s=30.0,
        sweep_interval_s=1.0,
    )
    with Stack(settings, StackConfig(worker_flags=WORKER_FLAGS, port=0, tick_s=0.3)) as s:
        yield s


def test_cost_search_with_measured_trials_runs_end_to_end(stack: Stack) -> None:
    with stack.sessions() as session:
        secret = repo.create_token(session, name="alice", role="user").secret
    client = StrategistClient(stack.url, secret)
    sid = client.create_search(
        model="CTRDNN",
        cluster="HeterPS-2GPU",
        objective="cost",
        plan_kind="heterogeneous",
        plan_options={"throughput_limit": 1e5},
        trial_budget=2,
        candidates_per_round=2,
        samples_per_round=2,
    ).id
    status = client.wait(sid, interval_s=1.0, timeout_s=420)
    assert status.search.state == "completed", status.search.failure_reason
    trials = [t.model_dump(mode="json") for t in client.trials(sid)]
    assert sorted(t["baseline"] or "candidate" for t in trials) == [
        "aibox",
        "all-gpu",
        "candidate",
        "candidate",
    ]
    costs = client.costs(sid).model_dump(mode="json")
    by_trial = {p["trial_id"]: p for p in costs["plans"]}
    for t in trials:
        assert t["state"] == "succeeded" and t["attempt"] == 1, (t["id"], t["failure_reason"])
        m = t["measurement"]
        d = m["details"]
        assert m["environment"]["testbed"] in ("netns", "loopback")
        assert len(t["iteration_times"]) == ITERATIONS - WARMUP
        doc = t["strategy"]
        # Formula 8 at the measured throughput; iteration times are B / per-iteration throughput
        assert d["money"] == pytest.approx(
            doc["samples"] / d["throughput"] * d["price_per_hour"] / 3600, rel=1e-9
        )
        assert d["price_per_hour"] == pytest.approx(doc["predicted"]["price_per_hour"], rel=1e-9)
        assert d["predicted_throughput"] == pytest.approx(doc["predicted"]["throughput"], rel=1e-9)
        assert statistics.median(t["iteration_times"]) == pytest.approx(t["median_time"])
        assert len(d["stages"]) == len(doc["plan"]["stages"])
        p = by_trial[t["id"]]
        assert (p["measured_money"], p["measured_throughput"]) == (d["money"], d["throughput"])
        assert [(s["resource_type"], s["units"]) for s in p["stages"]] == [
            (s["resource_type"], s["units"]) for s in doc["plan"]["stages"]
        ]
    for p in costs["plans"]:  # shown with -s: predicted vs measured per plan
        print(
            f"{p['label']:>16} {p['state']} predicted {p['predicted_money']:.2f} USD {p['predicted_throughput']:.4g}/s"
            f" measured {p['measured_money']:.2f} USD {p['measured_throughput']:.4g}/s"
            f" ({p['measured_throughput'] / p['predicted_throughput'] - 1:+.1%})"
        )
    meeting = [p for p in costs["plans"] if p["measured_throughput"] >= 1e5]
    best = min(meeting, key=lambda p: p["measured_money"], default=None)
    assert (costs["best"] or {}).get("label") == (best or {}).get("label")
    cands = [p for p in meeting if p["candidate_id"] is not None]
    best_cand = min(cands, key=lambda p: p["measured_money"], default=None)
    assert status.best_candidate_id == (best_cand["candidate_id"] if best_cand else None)
