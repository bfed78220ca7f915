"""Memory feasibility: hand-computed bytes, rejections with reasons, and the sampler's filtering."""

from __future__ import annotations

import numpy as np
import pytest

from search import ConstrainedSampler, MemoryConfig, MemoryModel, Space
from search.samplers import InfeasibleSpaceError
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    DeviceType,
    Layer,
    ModelSpec,
    Node,
    PSSync,
    Strategy,
    Variable,
    VariableStrategy,
)


def _model(activation_bytes: float = 1e6) -> ModelSpec:
    # one float32 matrix of 1e8 bytes; 1e6 activation bytes per sample, batch 10 -> 1e7
    var = Variable(name="w", shape=(5000, 5000))
    layer = Layer(name="l", kind="linear", fwd_flops=1.0, activation_bytes=activation_bytes, variables=(var,))
    return ModelSpec(name="m", batch_size=10, layers=(layer,))


def _cluster(device_gb: float = 0.3, host_gb: float = 0.4) -> ClusterSpec:
    t = DeviceType(name="g", fp32_tflops=1, fp16_tflops=1, memory_gb=device_gb, memory_bw_gbs=1)
    nodes = (
        Node(name="a", device="g", gpus=1, nic_gbps=10, host_memory_gb=host_gb),
        Node(name="b", device="g", gpus=1, nic_gbps=10, host_memory_gb=64),
    )
    return ClusterSpec(name="c", device_types=(t,), nodes=nodes, intra_node_gbps=10)


def _strategy(sync: PSSync | CollectiveSync) -> Strategy:
    return Strategy(variables=(VariableStrategy(variable="w", shards=(sync,)),))


def test_collective_needs_optimizer_state_on_the_gpu() -> None:
    mem = MemoryModel(_model(), _cluster())
    v = mem.check(_strategy(CollectiveSync()))
    # params 1e8 + grads 1e8 + Adam 2e8 + activations 1e7 = 4.1e8 > 0.9 x 0.3e9 = 2.7e8
    assert v.device_bytes == pytest.approx(4.1e8)
    assert v.device_capacity == pytest.approx(2.7e8)
    assert not v.ok and len(v.reasons) == 1 and v.reasons[0].startswith("device memory: 0.41 GB")
    sgd = MemoryModel(_model(), _cluster(), MemoryConfig(optimizer="sgd")).check(_strategy(CollectiveSync()))
    assert sgd.ok and sgd.device_bytes == pytest.approx(2.1e8)


def test_powersgd_error_feedback_counts() -> None:
    mem = MemoryModel(_model(), _cluster(), MemoryConfig(optimizer="sgd"))
    v = mem.check(_strategy(CollectiveSync(compressor=Compressor(kind="powersgd", rank=4))))
    assert v.device_bytes == pytest.approx(3.1e8) and not v.ok


def test_ps_server_host_memory() -> None:
    mem = MemoryModel(_model(), _cluster())
    on_a = mem.check(_strategy(PSSync(server="a")))
    # device: 1e8 + 1e8 + 1e7 fits; host of a: 1e8 x (param + grad accumulator + 2 Adam) = 4e8 > 0.32e9
    assert on_a.device_bytes == pytest.approx(2.1e8)
    assert on_a.host_bytes == {"a": pytest.approx(4e8)}
    assert not on_a.ok and on_a.reasons[0].startswith("host memory of PS server a: 0.40 GB > 0.32 GB")
    assert mem.check(_strategy(PSSync(server="b"))).ok


def test_sampler_keeps_only_feasible_and_records_why(model: ModelSpec) -> None:
    """On 0.3 GB GPUs the toy model fits only with enough of its bytes on PS: the sampler drops the rest."""
    cluster = _cluster(device_gb=0.3)
    mem = MemoryModel(model, cluster, MemoryConfig(activation_factor=100.0))
    sampler = ConstrainedSampler(Space(model, cluster), seed=0, memory=mem)
    kept = sampler.sample(30)
    assert all(mem.check(s).ok for s in kept)
    assert sampler.rejections and all(r.feasibility.reasons for r in sampler.rejections)
    assert all(
        not mem.check(sampler.draw(np.random.default_rng([0, r.draw]))).ok for r in sampler.rejections[:5]
    )


def test_sampler_gives_up_with_the_reason_when_nothing_fits(model: ModelSpec) -> None:
    mem = MemoryModel(model, _cluster(device_gb=0.01))
    sampler = ConstrainedSampler(Space(model, _cluster(device_gb=0.01)), seed=0, memory=mem)
    with pytest.raises(InfeasibleSpaceError, match="device memory"):
        sampler.sample(2)
