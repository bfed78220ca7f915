"""One round's decision (sample → score → select) and the worker's pools, on small hand-made specs."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.worker.pools import fits_gpus, fits_testbed, runnable_clusters, trial_processes
from search import DEFAULTS, ArraySampler, MemoryModel, Space, run_round
from search.similarity import FactorSimilarity
from search.space import space_of
from service.loop.rounds import RoundConfig, drafts, plan_round
from simulator.analytical import AnalyticalSimulator
from simulator.spec import ClusterSpec, ModelSpec, Strategy, strategy_key


def model() -> ModelSpec:
    layers = [
        {
            "name": f"fc{i}",
            "kind": "linear",
            "fwd_flops": 1e6,
            "activation_bytes": 1e3,
            "variables": [{"name": f"fc{i}.weight", "shape": [256, 256]}],
            "inputs": [f"fc{i - 1}"] if i else [],
        }
        for i in range(4)
    ]
    return ModelSpec.model_validate({"name": "mlp4", "batch_size": 8, "layers": layers})


def cluster(nodes: int = 2, gpus: int = 1, device: str = "T4-16GB", nic: float = 10.0) -> ClusterSpec:
    gpu = {"name": device, "fp32_tflops": 8.1, "fp16_tflops": 65, "memory_gb": 16, "memory_bw_gbs": 320}
    return ClusterSpec.model_validate(
        {
            "name": f"c{nodes}x{gpus}",
            "device_types": [gpu],
            "nodes": [
                {"name": f"n{i}", "device": device, "gpus": gpus, "nic_gbps": nic} for i in range(nodes)
            ],
            "intra_node_gbps": 100,
        }
    )


def test_plan_round_picks_k_distinct_untried_strategies_ranked_by_prediction() -> None:
    m, c = model(), cluster()
    sim = AnalyticalSimulator()
    first = plan_round(m, c, sim, samples=40, k=3, seed=5)
    assert [d.rank for d in first] == [1, 2, 3]
    times = [d.predicted_time for d in first]
    assert times == sorted(times)
    strategies = [Strategy.model_validate(d.strategy) for d in first]
    np.testing.assert_allclose(sim.predict(m, c, strategies), times)
    assert len({strategy_key(s) for s in strategies}) == 3
    # the same seed again, excluding what was tried: none of the first round comes back
    again = plan_round(m, c, sim, samples=40, k=3, seed=5, exclude=[d.strategy for d in first])
    assert not {strategy_key(d.strategy) for d in again} & {strategy_key(s) for s in strategies}


def test_alpha_zero_takes_the_best_predicted_of_the_sample() -> None:
    m, c = model(), cluster()
    sim = AnalyticalSimulator()
    picked = plan_round(m, c, sim, samples=30, k=2, seed=1, config=RoundConfig(alpha=0.0))
    sampled = ArraySampler(Space(m, c), 1, MemoryModel(m, c), chunk=30).sample(30)
    best = np.sort(np.unique(sim.predict(m, c, sampled)))[:1]
    assert picked[0].predicted_time == pytest.approx(best[0])


def test_the_service_round_is_the_search_round() -> None:
    """plan_round is run_round with the same defaults: the same picks for the same seed."""
    m, c = model(), cluster()
    sim = AnalyticalSimulator()
    assert RoundConfig() == DEFAULTS
    drafts_ = plan_round(m, c, sim, samples=50, k=4, seed=3)
    direct = run_round(m, c, sim, samples=50, k=4, seed=3)
    assert {strategy_key(d.strategy) for d in drafts_} == {strategy_key(s) for s in direct.strategies}


def test_lossy_round_is_split_in_a_lossless_and_a_lossy_half() -> None:
    m, c = model(), cluster()
    picks = plan_round(m, c, AnalyticalSimulator(), samples=40, k=4, seed=0, compression="fp16")
    spaces = [space_of(Strategy.model_validate(d.strategy)) for d in picks]
    assert sorted(spaces) == ["lossless", "lossless", "lossy", "lossy"]


def test_drafts_similarity_is_the_mean_over_the_other_picks() -> None:
    m = model()
    s = [
        Strategy.model_validate(d.strategy)
        for d in plan_round(m, cluster(), AnalyticalSimulator(), samples=20, k=3, seed=2)
    ]
    sim = FactorSimilarity(m).matrix(s)
    out = drafts(s, [3.0, 1.0, 2.0], sim.tolist())
    assert [d.predicted_time for d in out] == [1.0, 2.0, 3.0]  # ranked by predicted time
    assert out[0].similarity == pytest.approx((sim[1, 0] + sim[1, 2]) / 2)


def test_strategy_key_ignores_labels() -> None:
    s = Strategy.model_validate(
        plan_round(model(), cluster(), AnalyticalSimulator(), samples=5, k=1, seed=0)[0].strategy
    )
    assert strategy_key(s) == strategy_key(s.model_copy(update={"name": "other", "model": "mlp4"}))
    assert strategy_key(s) == strategy_key(s.model_dump(mode="json"))


def test_worker_pools() -> None:
    small, big = cluster(2, 1), cluster(8, 4)
    assert trial_processes(small) == 4 and trial_processes(big) == 40
    assert fits_testbed(small) and not fits_testbed(big)
    assert runnable_clusters("testbed", [small, big]) == ["c2x1"]
    a100 = cluster(1, 2, device="A100-SXM4-80GB")
    assert fits_gpus(a100, ["NVIDIA A100-SXM4-80GB"] * 2)
    assert not fits_gpus(a100, ["NVIDIA A100-SXM4-80GB"])  # too few GPUs
    assert not fits_gpus(a100, ["NVIDIA H100 80GB HBM3"] * 2)  # other hardware
    assert not fits_gpus(cluster(2, 1, device="A100-SXM4-80GB"), ["NVIDIA A100-SXM4-80GB"] * 4)  # two hosts
    with pytest.raises(ValueError, match="pool"):
        runnable_clusters("cloud", [small])
