"""Pipeline-length cost model: compute per stage, transfer moving average, hand-worked lengths."""

from __future__ import annotations

import pytest

from simulator.analytical.compute import layer_times
from simulator.analytical.params import CostParams
from simulator.pipeline.cost import (
    TransferWindow,
    pipeline_length,
    plan_stage_times,
    prior_transfers,
    stage_compute_seconds,
)
from simulator.spec import ClusterSpec, DeviceType, Layer, ModelSpec, Node, Plan, Stage, Variable

GPU = DeviceType(name="g", fp32_tflops=10.0, fp16_tflops=20.0, memory_gb=16.0, memory_bw_gbs=900.0)


def model() -> ModelSpec:
    return ModelSpec(
        name="m",
        batch_size=8,
        layers=tuple(
            Layer(
                name=f"l{i}",
                kind="block",
                fwd_flops=1e9,
                activation_bytes=1e6,
                variables=(Variable(name=f"l{i}.w", shape=(4,)),),
            )
            for i in range(4)
        ),
    )


def cluster() -> ClusterSpec:
    nodes = tuple(Node(name=f"n{i}", device="g", gpus=1, nic_gbps=8.0) for i in range(2))
    return ClusterSpec(name="c", device_types=(GPU,), nodes=nodes, intra_node_gbps=100.0)


def plan(schedule: str = "1f1b", k: int = 1) -> Plan:
    return Plan(
        stages=(
            Stage(first_layer=0, last_layer=1, devices=("n0:0",)),
            Stage(first_layer=1, last_layer=4, devices=("n1:0",)),
        ),
        global_batch=8,
        batch_shares={"n0:0": 8},
        micro_batch_size=2,
        num_micro_batches=4,
        schedule=schedule,
        k=k,
    )


def test_stage_compute_is_the_compute_models_layer_times() -> None:
    # one call into the compute model: the stage's sums of layer_times for one micro-batch
    t = layer_times(model(), GPU, 2, CostParams(efficiency=0.5))
    f, b = stage_compute_seconds(model(), GPU, 1, 4, 2, 0.5)
    assert f == pytest.approx(float(t.fwd[1:4].sum()))
    assert b == pytest.approx(float(t.bwd[1:4].sum()))
    assert f > 0 and b > 0
    fwd, bwd = plan_stage_times(model(), cluster(), plan(), 0.5)
    assert fwd == pytest.approx([float(t.fwd[0]), f])
    assert bwd == pytest.approx([float(t.bwd[0]), b])


def test_stage_compute_takes_the_full_cost_params() -> None:
    """Issue 15: op efficiencies, compute dtype and profiles reach the stage compute when given."""
    from simulator.spec.profile import LayerTime, Profile

    prof = Profile(model="m", device="g", batch=2, layers=(LayerTime(name="l1", fwd_s=0.5, bwd_s=1.5),))
    params = CostParams(efficiency=0.5).with_profiles((prof,))
    rest = layer_times(model(), GPU, 2, CostParams(efficiency=0.5))
    f, b = stage_compute_seconds(model(), GPU, 1, 4, 2, params=params)
    # the profiled layer is measured, the others the roofline (profile+roofline)
    assert f == pytest.approx(0.5 + float(rest.fwd[2:4].sum()))
    assert b == pytest.approx(1.5 + float(rest.bwd[2:4].sum()))
    # params win over the efficiency argument
    quarter = stage_compute_seconds(model(), GPU, 1, 4, 2, 0.5, params=CostParams(efficiency=0.25))
    assert quarter[0] == pytest.approx(2 * float(rest.fwd[1:4].sum()))
    fwd, _ = plan_stage_times(model(), cluster(), plan(), params=params)
    assert fwd[1] == pytest.approx(f)


def test_prior_transfer_is_bytes_over_bandwidth() -> None:
    # 1 MB per sample x 2 samples over 8 Gbit/s = 2 ms each way
    assert prior_transfers(model(), cluster(), plan()) == {
        (0, 1): pytest.approx(2e-3),
        (1, 0): pytest.approx(2e-3),
    }


def test_transfer_window_is_a_moving_average() -> None:
    w = TransferWindow(window=3)
    assert w.mean((0, 1)) is None
    for t in (1.0, 2.0, 3.0, 10.0):
        w.add((0, 1), t)
    assert w.mean((0, 1)) == pytest.approx(5.0)  # (2 + 3 + 10) / 3: the first sample left the window
    assert w.means() == {(0, 1): pytest.approx(5.0)}
    with pytest.raises(ValueError, match="window"):
        TransferWindow(window=0)
    with pytest.raises(ValueError, match=">= 0"):
        w.add((0, 1), float("nan"))


def test_pipeline_length_hand_worked_with_dp_sync() -> None:
    # GPipe, 2 stages, 4 micro-batches; F = 1, B = 2 on both; transfers 0 -> 1 s.
    # stage 0 forwards 0..4; stage 1 F(i) at 1+i .. 2+i, B's 5..13 (ends 13); grad of B(i) on stage 1
    # ends at 7+2i, so stage 0's B's run 7..9, 9..11, 11..13, 13..15; stage 0 ends at 15, +0.5 all-reduce
    got = pipeline_length(plan("gpipe"), [1, 1], [2, 2], {}, dp_sync=[0.5, 0.25])
    assert got == pytest.approx(15.5)
    # transfers of 1 s each way: stage 1's F(i) at 2+i; B's from 6 to 14, grads arrive 9, 11, 13, 15
    got = pipeline_length(plan("gpipe"), [1, 1], [2, 2], {(0, 1): 1.0, (1, 0): 1.0})
    assert got == pytest.approx(17.0)


def test_slow_links_favour_groups() -> None:
    slow = {(0, 1): 0.5, (1, 0): 0.5}
    one = pipeline_length(plan("1f1b"), [1, 1], [2, 2], slow)
    two = pipeline_length(plan("kfkb", 2), [1, 1], [2, 2], slow)
    assert two <= one


def test_cut_bytes_counts_the_skip_tensors_that_cross_the_cut() -> None:
    from simulator.pipeline.cost import cut_bytes
    from simulator.spec import Layer, ModelSpec, Variable

    def layer(name: str, out: float, inputs: tuple[str, ...] = ()) -> Layer:
        var = (Variable(name=f"{name}.w", shape=(2, 2)),)
        return Layer(
            name=name, kind="conv2d", fwd_flops=1.0, activation_bytes=out, variables=var, inputs=inputs
        )

    # enc1 -> enc2 -> mid -> dec2(mid, enc2) -> dec1(dec2, enc1)
    unet = ModelSpec(
        name="u",
        batch_size=2,
        layers=(
            layer("enc1", 100.0),
            layer("enc2", 10.0, ("enc1",)),
            layer("mid", 1.0, ("enc2",)),
            layer("dec2", 20.0, ("mid", "enc2")),
            layer("dec1", 200.0, ("dec2", "enc1")),
        ),
    )
    assert [cut_bytes(unet, c) for c in (1, 2, 3, 4)] == [100.0, 110.0, 111.0, 120.0]
    chain = unet.model_copy(
        update={"layers": tuple(la.model_copy(update={"inputs": ()}) for la in unet.layers)}
    )
    assert [cut_bytes(chain, c) for c in (1, 2, 3, 4)] == [100.0, 10.0, 1.0, 20.0]


def test_host_time_runs_before_each_compute_and_hides_in_a_wait() -> None:
    # as above without transfers, stage 0 spends 0.25 s of runtime before each compute: its F's run
    # 0.25-1.25, 1.5-2.5, 2.75-3.75, 4-5; stage 1 (no host time) F's 1.25-2.25 .. 5-6, B's 6..14;
    # stage 0's B0 waits for its gradient until 8 (the host time hides in the wait): 8-10, then
    # 10.25-12.25, 12.5-14.5, 14.75-16.75
    assert pipeline_length(plan("gpipe"), [1, 1], [2, 2], {}, host=[0.25, 0.0]) == pytest.approx(16.75)
    assert pipeline_length(plan("gpipe"), [1, 1], [2, 2], {}, host=[0.0, 0.0]) == pytest.approx(15.0)
    with pytest.raises(ValueError, match="host"):
        pipeline_length(plan("gpipe"), [1, 1], [2, 2], {}, host=[0.1])
