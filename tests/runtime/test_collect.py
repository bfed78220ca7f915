"""Runtime dataset collection: records, their files, and one real collection on the testbed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from runtime import collect as collect_module
from runtime.collect import (
    DirtyTreeError,
    Trial,
    baseline_trials,
    collect,
    compress_if_large,
    interleave,
    record,
    require_clean_tree,
)
from runtime.executor import ExecutorConfig
from runtime.executor.probe import PROBE_KINDS
from runtime.executor.reference import GPU, tiny_model
from runtime.testbed import netns
from simulator.analytical import BASELINES
from simulator.spec import ClusterSpec, CollectiveSync, Node, PSSync, Strategy, VariableStrategy
from simulator.spec.measurement import Measurement
from simulator.spec.records import FORMAT, load_records

MODEL = tiny_model()
CLUSTER = ClusterSpec(name="2x1", device_types=(GPU,), intra_node_gbps=100.0,
                      nodes=tuple(Node(name=f"n{i}", device=GPU.name, gpus=1, nic_gbps=1.0) for i in range(2)))  # fmt: skip


def every(sync: CollectiveSync | PSSync, name: str) -> Strategy:
    return Strategy(name=name, variables=tuple(VariableStrategy(variable=v.name, shards=(sync,))
                                               for v in MODEL.variables))  # fmt: skip


def test_record_of_a_measurement_and_of_a_failure() -> None:
    m = Measurement(iteration_times=(0.3, 0.1, 0.2), compute_times=(0.05, 0.07, 0.06),
                    sync_wait_times=(0.2, 0.0, 0.1), warmup=1, scale=40.0)  # fmt: skip
    rec = record(
        MODEL, CLUSTER, Trial(every(CollectiveSync(), "ar"), "baseline:horovod", 0), m, {"host": "h"}
    )
    assert rec["format"] == FORMAT and rec["baseline"] is True and rec["ok"] is True
    assert (rec["median_s"], rec["compute_s"], rec["sync_wait_s"]) == (0.2, 0.06, 0.1)
    assert rec["scale"] == 40.0 and rec["environment"]["host"] == "h" and "time_utc" in rec["environment"]
    assert Strategy.model_validate(rec["strategy"]).name == "ar"
    bad = record(MODEL, CLUSTER, Trial(every(CollectiveSync(), "ar"), "sampler:random", 3),
                 Measurement(failure="timeout: x"), {})  # fmt: skip
    assert (bad["ok"], bad["baseline"], bad["median_s"], bad["failure"], bad["index"]) == (
        False, False, None, "timeout: x", 3)  # fmt: skip


def test_large_files_are_gzipped_and_read_back(tmp_path: Path) -> None:
    small, big = tmp_path / "a" / "s.jsonl", tmp_path / "b" / "b.jsonl"
    for p, n in ((small, 2), (big, 50)):
        p.parent.mkdir()
        p.write_text("".join(json.dumps({"i": i, "pad": "x" * 100}) + "\n" for i in range(n)))
    assert compress_if_large(small, above=10_000) == small
    gz = compress_if_large(big, above=1_000)
    assert gz.name == "b.jsonl.gz" and not big.exists()
    with gzip.open(gz, "rt") as f:
        assert len(f.read().splitlines()) == 50
    assert sorted(r["i"] for r in load_records(tmp_path)) == sorted([0, 1, *range(50)])


def test_baseline_trials_cover_every_baseline() -> None:
    trials = baseline_trials(MODEL, CLUSTER)
    assert [t.source for t in trials] == [f"baseline:{b}" for b in BASELINES]
    for t in trials:
        t.strategy.check(MODEL, CLUSTER)


@pytest.mark.netns
@pytest.mark.skipif(netns.namespaces_usable() is not None, reason="network namespaces unavailable")
def test_collect_on_the_testbed_appends_one_record_per_trial(tmp_path: Path) -> None:
    trials = [
        Trial(every(CollectiveSync(), "ar"), "sampler:random", 0),
        Trial(every(PSSync(server="n1"), "ps"), "sampler:random", 1),
        Trial(every(PSSync(server="nowhere"), "bad"), "sampler:random", 2),
    ]
    out = tmp_path / "t.jsonl"
    seen: list[dict[str, object]] = []
    cfg = ExecutorConfig(warmup=1, iterations=2, timeout_s=60, scale=5.0, dilation=2.0)
    assert collect(MODEL, CLUSTER, trials, out, config=cfg, on_record=seen.append) == out
    recs = list(load_records(out))
    assert recs == seen and [r["index"] for r in recs] == [0, 1, 2]
    assert [r["ok"] for r in recs] == [True, True, False]
    assert "invalid strategy" in str(recs[2]["failure"])
    env = recs[0]["measurement"]["environment"]
    assert env["testbed"] == "netns" and env["shaped"] is True and env["rates_mbit"] == [100.0, 100.0]
    assert recs[0]["environment"]["git_commit"] != "" and recs[0]["scale"] == 5.0
    assert len(recs[0]["measurement"]["iteration_times"]) == 2
    for rec in recs[:2]:  # what every measured record carries (issue 13)
        assert rec["dilation"] == 2.0 and rec["attempts"] >= 1 and isinstance(rec["noisy"], bool)
        assert set(rec["per_call_overhead_s"]) == set(PROBE_KINDS)
        assert all(0 < v < 1 for v in rec["per_call_overhead_s"].values())
        lo, hi = rec["median_ci95_s"]
        assert lo <= rec["median_s"] <= hi
        assert 0.0 <= rec["foreign_cpu_share"] <= 1.0
        own = rec["measurement"]["environment"]["own_cpu_share"]
        assert 0.0 < own <= 1.0 and own + rec["foreign_cpu_share"] <= 1.05  # shares of one host
    # Resuming: measured strategies are skipped, only the new one runs and is appended.
    extra = Trial(every(CollectiveSync(algorithm="hierarchical"), "hier"), "sampler:random", 3)
    seen.clear()
    collect(MODEL, CLUSTER, [*trials, extra], out, config=cfg, on_record=seen.append)
    assert [r["index"] for r in seen] == [3]
    assert [r["index"] for r in load_records(out)] == [0, 1, 2, 3]


def test_interleave_keeps_the_sampled_order_and_scatters_the_baselines() -> None:
    sampled = [Trial(every(CollectiveSync(group=i), f"s{i}"), "sampler:random", i) for i in range(40)]
    bases = baseline_trials(MODEL, CLUSTER)
    mixed = interleave(bases, sampled, seed=3)
    assert [t for t in mixed if t.source.startswith("sampler")] == sampled
    assert sorted(t.source for t in mixed if t.source.startswith("baseline")) == sorted(
        b.source for b in bases
    )
    positions = [i for i, t in enumerate(mixed) if t.source.startswith("baseline")]
    assert positions != list(range(len(bases)))  # not all first
    assert interleave(bases, sampled, seed=3) == mixed  # seeded


def test_collect_refuses_to_write_into_the_dataset_from_a_dirty_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = collect_module.REPO_ROOT / "datasets" / "runtimes" / "X__Y" / "t.jsonl"
    monkeypatch.setattr(collect_module, "git_commit", lambda: "abc123-dirty")
    with pytest.raises(DirtyTreeError, match="uncommitted changes"):
        require_clean_tree(inside)
    with pytest.raises(DirtyTreeError):
        collect(MODEL, CLUSTER, [], inside, config=ExecutorConfig())
    require_clean_tree(tmp_path / "t.jsonl")  # elsewhere: allowed, the commit is recorded as is
    monkeypatch.setattr(collect_module, "git_commit", lambda: "abc123")
    require_clean_tree(inside)


class _FakeSession:
    """Stands in for ExecutorSession: each run takes 10 % longer than the one before (a host
    drifting slower), whatever the strategy."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.runs: list[str] = []

    def __enter__(self) -> _FakeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, strategy: Strategy) -> Measurement:
        self.runs.append(strategy.name)
        t = 0.1 * 1.1 ** len(self.runs)
        return Measurement(iteration_times=(t, t), compute_times=(0.0, 0.0), sync_wait_times=(t, t),
                           warmup=1, scale=1.0, environment={"foreign_cpu_share": 0.0})  # fmt: skip


def test_a_drift_reference_is_measured_every_n_trials_and_is_not_a_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextlib import nullcontext

    from runtime.collect import REFERENCE, reference_drift
    from simulator.spec.records import load_trials

    monkeypatch.setattr(collect_module, "make_launcher", lambda *a, **k: nullcontext())
    monkeypatch.setattr(collect_module, "ExecutorSession", _FakeSession)
    trials = [Trial(every(CollectiveSync(group=i), f"s{i}"), "sampler:random", i) for i in range(5)]
    ref = Trial(every(CollectiveSync(group=7), "ref"), f"{REFERENCE}horovod", 0)
    out = tmp_path / "t.jsonl"
    cfg = ExecutorConfig()
    collect(MODEL, CLUSTER, trials, out, config=cfg, reference=ref, reference_every=2)
    recs = list(load_records(out))
    order = [r["source"] if r["reference"] else r["index"] for r in recs]
    assert order == [ref.source, 0, 1, ref.source, 2, 3, ref.source, 4, ref.source]
    # The reference's times show the drift (each run 10 % slower than the one before it).
    drift = reference_drift(out)
    assert (
        len(drift) == 4 and drift == sorted(drift) and drift[-1] / drift[0] == pytest.approx(1.1**8)
    )  # runs 1 and 9
    # Not a trial: the readers that build domains leave it out, and resuming skips the measured
    # trials only (a trial of the reference's strategy is still to do).
    assert [r["index"] for r in load_trials(out)] == [0, 1, 2, 3, 4]
    extra = Trial(ref.strategy, "sampler:random", 9)
    seen: list[dict[str, object]] = []
    collect(MODEL, CLUSTER, [*trials, extra], out, config=cfg, on_record=seen.append, reference=ref,
            reference_every=2)  # fmt: skip
    assert [r["source"] for r in seen] == [ref.source, "sampler:random", ref.source]
    with pytest.raises(ValueError, match="reference"):
        collect(MODEL, CLUSTER, trials, out, config=cfg, reference=trials[0], reference_every=2)
    with pytest.raises(ValueError, match="reference"):
        collect(MODEL, CLUSTER, trials, out, config=cfg, reference=ref, reference_every=0)
