"""Replay and the cost model use a stored profile for its key through one function (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.executor import ExecutorConfig, ExecutorSession, LocalLauncher
from runtime.executor.reference import GPU, tiny_model
from runtime.executor.worker import layer_seconds
from runtime.executor.worker_main import read_profiles, write_profiles
from simulator.analytical import CostParams
from simulator.analytical import formulas as f
from simulator.profile import ProfileStore
from simulator.spec import ClusterSpec, CollectiveSync, Node, Strategy, VariableStrategy
from simulator.spec.profile import LayerTime, Profile

MODEL = tiny_model()
CLUSTER = ClusterSpec(name="1x2", device_types=(GPU,), intra_node_gbps=100.0,
                      nodes=(Node(name="n0", device=GPU.name, gpus=2, nic_gbps=10.0),))  # fmt: skip
# 10 and 20 ms per layer: thousands of times the roofline's microseconds on the toy GPU.
PROFILE = Profile(
    model=MODEL.name,
    device=GPU.name,
    dtype="float32",
    batch=MODEL.batch_size,
    layers=tuple(LayerTime(name=layer.name, fwd_s=0.010, bwd_s=0.020) for layer in MODEL.layers),
    source="test",
)


def test_replay_and_cost_model_take_the_profile_for_its_key() -> None:
    roofline = layer_seconds(MODEL, GPU, MODEL.batch_size, 0.5)
    replay = layer_seconds(MODEL, GPU, MODEL.batch_size, 0.5, (PROFILE,))
    assert replay == [(0.010, 0.020)] * len(MODEL.layers)
    assert sum(a + b for a, b in roofline) < 1e-3
    # The cost model's T_comp with the same profile is the same sum (one function), and says so.
    params = CostParams(efficiency=0.5).with_profiles((PROFILE,))
    times = f.compute_source(MODEL, CLUSTER, params)
    assert times.source == "profile" and times.profiled_layers == len(MODEL.layers)
    assert f.compute_time(MODEL, CLUSTER, params) == pytest.approx(sum(a + b for a, b in replay))
    # Another batch is another key: the roofline again.
    assert layer_seconds(MODEL, GPU, MODEL.batch_size + 1, 0.5, (PROFILE,)) == layer_seconds(
        MODEL, GPU, MODEL.batch_size + 1, 0.5
    )


def test_a_profile_of_some_layers_leaves_the_rest_to_the_roofline() -> None:
    part = PROFILE.model_copy(update={"layers": PROFILE.layers[:1]})
    roofline = layer_seconds(MODEL, GPU, MODEL.batch_size, 1.0)
    mixed = layer_seconds(MODEL, GPU, MODEL.batch_size, 1.0, (part,))
    assert mixed[0] == (0.010, 0.020) and mixed[1:] == roofline[1:]
    times = f.compute_source(MODEL, CLUSTER, CostParams().with_profiles((part,)))
    assert times.source == "profile+roofline" and times.profiled_layers == 1


def test_profiles_travel_to_the_ranks_unchanged(tmp_path: Path) -> None:
    write_profiles(tmp_path, (PROFILE,))
    assert read_profiles(tmp_path) == (PROFILE,)
    assert read_profiles(tmp_path / "absent") == ()


def test_a_session_takes_the_stored_profiles_of_its_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATEGIST_PROFILES", str(tmp_path))
    store = ProfileStore()
    store.save(PROFILE)
    store.save(PROFILE.model_copy(update={"model": "another-model"}))
    s = ExecutorSession(MODEL, CLUSTER, LocalLauncher(), ExecutorConfig())
    assert s.profiles == (PROFILE,)
    assert ExecutorSession(MODEL, CLUSTER, LocalLauncher(), ExecutorConfig(), profiles=()).profiles == ()


def test_a_replayed_step_takes_the_profiles_time() -> None:
    # Replay sleeps until deadlines, so its compute never takes less than the profile says; the
    # roofline alone would be ~0.1 ms. A lower bound only: no timed upper assertion.
    strategy = Strategy(
        variables=tuple(
            VariableStrategy(variable=v.name, shards=(CollectiveSync(),)) for v in MODEL.variables
        )
    )
    cfg = ExecutorConfig(compute="replay", warmup=1, iterations=2, timeout_s=30, probe_repeats=0)
    with ExecutorSession(MODEL, CLUSTER, LocalLauncher(), cfg, profiles=(PROFILE,)) as s:
        m = s.run(strategy)
    assert m.ok, m.failure
    assert min(m.compute_times) >= 0.030 * len(MODEL.layers) * 0.999
