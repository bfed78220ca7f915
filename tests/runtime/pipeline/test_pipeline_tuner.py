"""Online auto-tuner: decisions from profiles (unit) and a real run that switches plans (slow)."""

from __future__ import annotations

import pytest

from runtime.executor import ExecutorConfig, LocalLauncher
from runtime.executor.reference import linear, two_by_two
from runtime.pipeline import AutoTuner, PipelineConfig, TunerConfig, TunerRun, run_pipeline
from runtime.pipeline.profile import Profile
from runtime.pipeline.stage_net import reference_step
from simulator.pipeline.cost import pipeline_length
from simulator.spec import ModelSpec, Plan, Stage


def plan(k: int, b: int, stages: int = 4, batch: int = 8) -> Plan:
    n = batch // b
    return Plan(
        stages=tuple(
            Stage(first_layer=s, last_layer=s + 1, devices=(f"n{s // 2}:{s % 2}",)) for s in range(stages)
        ),
        global_batch=batch,
        batch_shares={"n0:0": batch},
        micro_batch_size=b,
        num_micro_batches=n,
        schedule="1f1b" if k == 1 else "gpipe" if k == n else "kfkb",
        k=k if 1 < k < n else 1,
    )


def profile(transfer: float, fwd: float = 1.0) -> Profile:
    links = {(a, a + 1): [transfer] * 4 for a in range(3)} | {(a + 1, a): [transfer] * 4 for a in range(3)}
    return Profile(links, [fwd] * 4, [2 * fwd] * 4)


def test_slow_links_switch_from_1f1b_to_groups_and_say_why() -> None:
    cands = [plan(1, 1), plan(2, 1), plan(4, 1)]
    t = AutoTuner(cands, current=0, config=TunerConfig(margin=0.02))
    assert t.decide(0) == 0 and t.log[-1]["reason"] == "no profile of the current plan yet"
    t.observe(profile(transfer=0.5))
    want = {
        i: pipeline_length(c, [1.0] * 4, [2.0] * 4, {k: 0.5 for k in profile(0.5).transfers})
        for i, c in enumerate(cands)
    }
    assert want[1] < want[0]
    chosen = t.decide(4)
    assert chosen == min(want, key=lambda i: (want[i], i)) != 0
    entry = t.log[-1]
    assert entry["switch_to"] == chosen and "predicted" in entry["reason"]
    assert entry["predicted_s"] == {str(i): pytest.approx(v) for i, v in want.items()}


def test_fast_links_keep_1f1b_within_the_margin() -> None:
    t = AutoTuner([plan(1, 1), plan(2, 1)], current=0, config=TunerConfig(margin=0.05))
    t.observe(profile(transfer=0.0))
    assert t.decide(4) == 0
    assert t.log[-1]["reason"] == "current plan within margin of the best"


def test_unmeasured_micro_batch_sizes_are_scaled_linearly() -> None:
    t = AutoTuner([plan(1, 2), plan(2, 1)], current=0)
    t.observe(profile(transfer=0.2, fwd=2.0))  # measured at b = 2
    # candidate 1 (b = 1): compute and transfers halve
    assert t.estimate(1) == pytest.approx(
        pipeline_length(plan(2, 1), [1.0] * 4, [2.0] * 4, {k: 0.1 for k in profile(0.2).transfers})
    )


def test_each_candidate_keeps_its_own_measured_residual() -> None:
    cands = [plan(1, 2), plan(4, 1)]
    t = AutoTuner(cands, current=0, config=TunerConfig(margin=0.0))
    model0 = pipeline_length(cands[0], [2.0] * 4, [4.0] * 4, {k: 0.0 for k in profile(0.0).transfers})
    t.observe(profile(transfer=0.0, fwd=2.0), [model0 + 0.4])  # 1F1B b=2: 0.4 s beyond its model
    assert t.residual(0) == pytest.approx(0.4)
    assert t.residual(1) == pytest.approx(0.4 / 4 * 8)  # prior: per micro-batch, 8 micro-batches
    t.current = 1
    model1 = pipeline_length(cands[1], [1.0] * 4, [2.0] * 4, {k: 0.0 for k in profile(0.0).transfers})
    t.observe(profile(transfer=0.0, fwd=1.0), [model1 + 12.0, model1 + 12.2, model1 + 11.8])
    assert t.residual(1) == pytest.approx(12.0)
    assert t.residual(0) == pytest.approx(0.4)  # 1F1B keeps what it measured, not k=4's excess
    t.decide(8)
    entry = t.log[-1]
    assert entry["measured_s"] == pytest.approx([model1 + 12.0, model1 + 12.2, model1 + 11.8])
    assert entry["residual_s"] == {"0": pytest.approx(0.4), "1": pytest.approx(12.0)}
    assert entry["switch_to"] == 0


def test_bad_tuner_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="interval"):
        TunerConfig(interval=0)
    with pytest.raises(ValueError, match="current"):
        AutoTuner([plan(1, 1)], current=3)


@pytest.mark.slow
def test_online_switches_keep_gradients_exact() -> None:
    model = ModelSpec(name="mlp", batch_size=8, layers=tuple(linear(f"l{i}", 6, 6) for i in range(4)))
    cands = [plan(1, 1, stages=2), plan(2, 1, stages=2), plan(4, 2, stages=2)]
    cands = [
        c.model_copy(
            update={
                "stages": (
                    Stage(first_layer=0, last_layer=2, devices=("n0:0",)),
                    Stage(first_layer=2, last_layer=4, devices=("n1:0",)),
                )
            }
        )
        for c in cands
    ]
    cfg = PipelineConfig(
        ExecutorConfig(compute="real", warmup=0, iterations=1, timeout_s=240), dtype="float64"
    )
    run = run_pipeline(
        model,
        two_by_two(),
        cands,
        LocalLauncher(),
        cfg,
        TunerRun(steps=8, start=0, config=TunerConfig(interval=2, margin=0.0)),
    )
    assert run.measurements[0].failure is None
    assert len(run.measurements[0].iteration_times) == 8
    assert [e["step"] for e in run.tuner_log] == [2, 4, 6]
    ref = reference_step(model, [(0, 2), (2, 4)], 0, 8, 8, 0.01, "float64")
    for rank in (0, 1):
        for step, grads in enumerate(run.grads[rank]):
            for name, g in grads.items():
                assert (g - ref[step][name]).abs().max().item() <= 1e-6
    # every step ran the candidate the tuner had chosen
    switches = {e["step"]: e["switch_to"] for e in run.tuner_log if "switch_to" in e}
    current, chosen = 0, []
    for step in range(8):
        current = switches.get(step, current)
        chosen.append(current)
    assert [st[0] for st in run.records[0]["steps"]] == chosen


def test_measured_excess_is_charged_per_micro_batch() -> None:
    # b = 4 (2 micro-batches) runs; the simulation says L but a step took L + 1 s: 0.5 s per micro-batch.
    cands = [plan(1, 4), plan(1, 1)]
    t = AutoTuner(cands, current=0, config=TunerConfig(margin=0.0))
    t.observe(profile(transfer=0.0, fwd=4.0))
    bare_0, bare_1 = t.estimate(0), t.estimate(1)
    assert bare_0 is not None and bare_1 is not None
    t.observe(profile(transfer=0.0, fwd=4.0), step_seconds=[bare_0 + 1.0, bare_0 + 1.0, bare_0 + 5.0])
    assert t.estimate(0) == pytest.approx(bare_0 + 1.0)  # the median step
    assert t.estimate(1) == pytest.approx(bare_1 + 0.5 * 8)  # 8 micro-batches of b = 1
    # a faster-than-simulated step charges nothing
    t.observe(profile(transfer=0.0, fwd=4.0), step_seconds=[0.0])
    assert t.estimate(1) == pytest.approx(bare_1)


def _burst_scenario(max_age: int) -> AutoTuner:
    """1F1B b=2 measured in a lull, then k=4 b=1 in a burst: U-Net's 2026-11-25b
    repeat 1, where 1F1B's estimate was its own step of 4 steps before (10x slower links here)."""
    cands = [plan(1, 2), plan(4, 1)]
    t = AutoTuner(cands, current=0, config=TunerConfig(margin=0.03, max_age=max_age))
    lull = profile(transfer=0.4, fwd=2.0)  # at b = 2
    l0 = pipeline_length(cands[0], [2.0] * 4, [4.0] * 4, {k: 0.4 for k in lull.transfers})
    t.observe(lull, [l0 + 0.1])
    assert t.decide(2) == 1  # grouping hides the transfers
    burst = profile(transfer=2.0, fwd=1.0)  # at b = 1: 0.2 s in the lull, 10x in the burst
    l1 = pipeline_length(cands[1], [1.0] * 4, [2.0] * 4, {k: 2.0 for k in burst.transfers})
    t.observe(burst, [l1 + 0.2, l1 + 0.2])
    return t


def test_a_stale_candidate_pays_the_current_network_not_the_one_it_ran_on() -> None:
    t = _burst_scenario(max_age=1)
    # 1F1B's transfers re-derived from the burst samples (x2 for b = 2): it is slower there too
    assert t.stale_age(0) == 1 and t.stale_age(1) is None
    burst_at_b2 = pipeline_length(
        t.candidates[0], [2.0] * 4, [4.0] * 4, {k: 4.0 for k in profile(0).transfers}
    )
    assert t.estimate(0) == pytest.approx(burst_at_b2 + 0.1)  # + its own residual
    assert t.decide(4) == 1
    entry = t.log[-1]
    assert "switch_to" not in entry and entry["rederived"] == {"0": 1}


def test_stale_estimates_switched_back_before_the_fix() -> None:
    """With samples that never age (the behaviour until 2026-11-25d), the lull's 1F1B wins."""
    t = _burst_scenario(max_age=100)
    assert t.stale_age(0) is None
    assert t.decide(4) == 0
    assert "rederived" not in t.log[-1]


def test_a_size_running_again_drops_its_stale_samples_and_says_why_it_switched() -> None:
    t = _burst_scenario(max_age=1)
    # the network recovers; suppose the tuner is sent back to 1F1B: its old lull samples are dropped
    t.current = 0
    fresh = profile(transfer=3.0, fwd=2.0)
    t.observe(fresh, [10.0])
    assert t._windows[2].means() == {k: pytest.approx(3.0) for k in fresh.transfers}
    assert t.stale_age(1) == 1  # now k=4 b=1's samples are the stale ones
    # a switch to a candidate whose transfers were re-derived names it in the reason
    t2 = _burst_scenario(max_age=1)
    t2.current = 0
    t2.observe(profile(transfer=0.0, fwd=2.0), [100.0])  # 1F1B is now terrible
    t2.decide(6)
    e = t2.log[-1]
    assert e["switch_to"] == 1 and "re-derived from the latest samples (b=2)" in e["reason"]


def test_floors_count_the_messages_nobody_waited_for() -> None:
    """Two of four messages per link waited 0.8 s; the other two arrived early: with the link's
    floor (0.1 s) the estimate uses 0.45 s per message, without it 0.8 s (only the late ones)."""
    links = [(a, a + 1) for a in range(3)] + [(a + 1, a) for a in range(3)]
    prof = Profile(
        {ln: [0.8, 0.8] for ln in links},
        [1.0] * 4,
        [2.0] * 4,
        messages={ln: [0.8, None, 0.8, None] for ln in links},
    )
    for floors, per_message in (({1: {ln: 0.1 for ln in links}}, 0.45), ({}, 0.8)):
        t = AutoTuner([plan(1, 1)], current=0, floors=floors)
        t.observe(prof)
        want = pipeline_length(plan(1, 1), [1.0] * 4, [2.0] * 4, {ln: per_message for ln in links})
        assert t.estimate(0) == pytest.approx(want)


def test_host_time_is_simulated_and_the_rest_charged_per_step() -> None:
    """With the runtime's host time in the profile, the simulation adds it before every compute
    (it grows with the micro-batch count there), and a candidate that has not run is charged the
    current plan's remaining excess per step, not per micro-batch."""
    cands = [plan(1, 4), plan(1, 1)]
    t = AutoTuner(cands, current=0, config=TunerConfig(margin=0.0))
    base = profile(transfer=0.0, fwd=4.0)
    prof = Profile(base.transfers, base.fwd, base.bwd, host=[0.3] * 4)
    t.observe(prof)
    zero = {k: 0.0 for k in prof.transfers}
    want_0 = pipeline_length(cands[0], [4.0] * 4, [8.0] * 4, zero, host=[0.3] * 4)
    want_1 = pipeline_length(cands[1], [1.0] * 4, [2.0] * 4, zero, host=[0.3] * 4)
    assert want_1 > pipeline_length(cands[1], [1.0] * 4, [2.0] * 4, zero) + 8 * 0.3  # per action
    assert t.estimate(0) == pytest.approx(want_0) and t.estimate(1) == pytest.approx(want_1)
    t.observe(prof, step_seconds=[want_0 + 1.0])
    assert t.estimate(0) == pytest.approx(want_0 + 1.0)
    assert t.estimate(1) == pytest.approx(want_1 + 1.0)  # per step (the per-micro-batch rule: + 4.0)
