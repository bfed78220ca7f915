"""Real pipeline runs (gloo, one process per stage replica) against a single-process reference.

Every phase of a run is one schedule (GPipe, 1F1B, kFkB k = 2 and 4) on the same processes, so a
run also checks that switching (k, b) at a step boundary keeps training exact.
"""

from __future__ import annotations

import pytest

from runtime.executor import ExecutorConfig, LocalLauncher
from runtime.executor.reference import linear, two_by_two
from runtime.pipeline import PipelineConfig, PipelineRun, TunerRun, run_pipeline
from runtime.pipeline.stage_net import reference_step
from runtime.testbed import Testbed, netns
from simulator.pipeline import kfkb
from simulator.spec import ModelSpec, Plan, Stage

TOL = 1e-6


def mlp(layers: int = 4) -> ModelSpec:
    widths = [6, 8, 5, 7, 6, 4, 6, 5][: layers + 1]
    return ModelSpec(
        name=f"mlp{layers}",
        batch_size=8,
        layers=tuple(linear(f"l{i}", widths[i], widths[i + 1]) for i in range(layers)),
    )


def make_plan(
    stages: int, replicas: int, schedule: str, k: int, b: int, shares: list[int], layers: int = 4
) -> Plan:
    devs = [f"n{i // 2}:{i % 2}" for i in range(4)]
    cut = [round(s * layers / stages) for s in range(stages + 1)]
    st = [
        Stage(
            first_layer=cut[s],
            last_layer=cut[s + 1],
            devices=tuple(devs[d * stages + s] for d in range(replicas)),
            replicate=replicas,
        )
        for s in range(stages)
    ]
    total = sum(shares)
    return Plan(
        stages=st,
        global_batch=total,
        batch_shares=dict(zip(st[0].devices, shares, strict=True)),
        micro_batch_size=b,
        num_micro_batches=total // b,
        schedule=schedule,
        k=k,
    )


def phases(stages: int, replicas: int, b: int, shares: list[int], layers: int = 4) -> list[Plan]:
    return [
        make_plan(stages, replicas, "gpipe", 1, b, shares, layers),
        make_plan(stages, replicas, "1f1b", 1, b, shares, layers),
        make_plan(stages, replicas, "kfkb", 2, b, shares, layers),
        make_plan(stages, replicas, "kfkb", 4, b, shares, layers),
    ]


def check_against_reference(
    model: ModelSpec, plans: list[Plan], run: PipelineRun, steps_per_phase: int
) -> None:
    assert all(m.failure is None for m in run.measurements), run.measurements
    plan = plans[0]
    bounds = [(s.first_layer, s.last_layer) for s in plan.stages]
    ref = reference_step(model, bounds, 0, plan.global_batch, steps_per_phase * len(plans), 0.01, "float64")
    P, D = len(plan.stages), plan.stages[0].replicate
    for rank in range(P * D):
        stage = plan.stages[rank % P]
        names = [
            v.name for layer in model.layers[stage.first_layer : stage.last_layer] for v in layer.variables
        ]
        assert len(run.grads[rank]) == len(ref)
        for step, grads in enumerate(run.grads[rank]):
            assert sorted(grads) == sorted(names)
            for name, g in grads.items():
                err = (g - ref[step][name]).abs().max().item()
                assert err <= TOL, f"rank {rank} step {step} {name}: |grad - reference| = {err:.3g}"
        # the processes ran the planner's action lists, in order
        d = rank // P
        for phase, p in enumerate(plans):
            n = p.replica_micro_batches(d)
            want = kfkb(P, n, p.group_size(n)).to_rows()[rank % P]
            assert run.records[rank]["schedules"][str(phase)] == want
        done = [(kind, mb) for kind, mb, _, _ in run.records[rank]["events"] if kind in ("F", "B")]
        planned = [
            (a.op.value, a.mb)
            for p in plans
            for _ in range(steps_per_phase)
            for a in kfkb(
                P, p.replica_micro_batches(d), p.group_size(p.replica_micro_batches(d))
            ).compute_order(rank % P)
        ]
        assert done == planned
        # every input a compute consumes from a neighbour was waited for (timed) right before it
        events = run.records[rank]["events"]
        waits = [(kind[5:], mb) for kind, mb, _, _ in events if kind in ("WAIT_F", "WAIT_B")]
        fed = [(k, mb) for k, mb in done if (k == "F" and rank % P > 0) or (k == "B" and rank % P < P - 1)]
        assert waits == fed
        # what the process really held: activations stashed between a micro-batch's F and its B
        at = 0
        for p in plans:
            n = p.replica_micro_batches(d)
            for _ in range(steps_per_phase):
                live = peak = 0
                for kind, _ in done[at : at + 2 * n]:
                    live += 1 if kind == "F" else -1
                    peak = max(peak, live)
                assert live == 0 and peak == min(n, (P - rank % P) * p.group_size(n))
                at += 2 * n


@pytest.mark.parametrize(
    ("replicas", "shares"),
    [(1, [8]), pytest.param(2, [8, 8], marks=pytest.mark.slow)],  # DP = 2 by default: the testbed test
    ids=["dp1", "dp2"],
)
def test_two_stages_every_schedule_matches_reference(replicas: int, shares: list[int]) -> None:
    model = mlp()
    plans = phases(2, replicas, 1, shares)
    cfg = PipelineConfig(
        ExecutorConfig(compute="real", warmup=0, iterations=1, timeout_s=240), dtype="float64"
    )
    run = run_pipeline(model, two_by_two(), plans, LocalLauncher(), cfg)
    check_against_reference(model, plans, run, 1)


@pytest.mark.slow
def test_four_stages_every_schedule_matches_reference() -> None:
    model = mlp()
    plans = phases(4, 1, 1, [8])
    run = run_pipeline(
        model,
        two_by_two(),
        plans,
        LocalLauncher(),
        PipelineConfig(ExecutorConfig(compute="real", warmup=0, iterations=3), dtype="float64"),
    )
    check_against_reference(model, plans, run, 3)


@pytest.mark.slow
def test_unequal_shares_and_partial_groups_match_reference() -> None:
    # replica 0 runs 6 micro-batches, replica 1 runs 2; k = 4 leaves a group of 2 on replica 0
    model = mlp(6)
    plans = [make_plan(2, 2, "kfkb", 4, 1, [6, 2], layers=6), make_plan(2, 2, "1f1b", 1, 2, [6, 2], layers=6)]
    run = run_pipeline(
        model,
        two_by_two(),
        plans,
        LocalLauncher(),
        PipelineConfig(ExecutorConfig(compute="real", warmup=0, iterations=3), dtype="float64"),
    )
    check_against_reference(model, plans, run, 3)


_NETNS = netns.namespaces_usable()


@pytest.mark.netns
@pytest.mark.skipif(_NETNS is not None, reason=f"no netns: {_NETNS}")
def test_stages_in_testbed_namespaces_match_reference() -> None:
    """Stage 0 on node n0, stage 1 on node n1 (shaped link between them); replicas DP-reduce inside a node."""
    model = mlp()
    cluster = two_by_two()
    stages = (
        Stage(first_layer=0, last_layer=2, devices=("n0:0", "n0:1"), replicate=2),
        Stage(first_layer=2, last_layer=4, devices=("n1:0", "n1:1"), replicate=2),
    )
    plans = [
        Plan(
            stages=stages,
            global_batch=16,
            batch_shares={"n0:0": 8, "n0:1": 8},
            micro_batch_size=1,
            num_micro_batches=16,
            schedule=schedule,
            k=k,
        )
        for schedule, k in (("gpipe", 1), ("1f1b", 1), ("kfkb", 2), ("kfkb", 4))
    ]
    with Testbed(cluster, scale=1.0) as tb:
        cfg = PipelineConfig(
            ExecutorConfig(compute="real", warmup=0, iterations=1, timeout_s=240), dtype="float64"
        )
        run = run_pipeline(model, cluster, plans, tb, cfg)
    check_against_reference(model, plans, run, 1)
    env = run.measurements[0].environment["launcher_environment"]
    assert env["testbed"] == "netns" and env["shaped"] is True


@pytest.mark.parametrize(
    ("replicas", "shares"),
    [(1, [8]), pytest.param(2, [8, 8], marks=pytest.mark.slow)],
    ids=["dp1", "dp2"],
)
def test_recompute_matches_reference(replicas: int, shares: list[int]) -> None:
    """Re-materialisation (GPipe as its paper runs it, and 1F1B) gives the reference's gradients;
    a phase without it follows on the same processes."""
    model = mlp()
    plans = [
        make_plan(2, replicas, "gpipe", 1, 1, shares),
        make_plan(2, replicas, "1f1b", 1, 2, shares),
        make_plan(2, replicas, "kfkb", 2, 1, shares),
    ]
    cfg = PipelineConfig(
        ExecutorConfig(compute="real", warmup=0, iterations=2, timeout_s=240), dtype="float64"
    )
    run = run_pipeline(model, two_by_two(), plans, LocalLauncher(), cfg, recompute=[0, 1])
    check_against_reference(model, plans, run, 2)


def test_recompute_replays_the_forward_in_backward() -> None:
    """In replay a re-materialising stage's B lasts its forward + backward sleep; without, backward only."""
    model = mlp()
    plans = [make_plan(2, 1, "gpipe", 1, 2, [8]), make_plan(2, 1, "gpipe", 1, 2, [8])]
    # dilation: the replayed sleeps (ms) dominate the runtime's own per-action cost
    cfg = PipelineConfig(
        ExecutorConfig(compute="replay", warmup=0, iterations=1, dilation=3e4, timeout_s=240)
    )
    run = run_pipeline(model, two_by_two(), plans, LocalLauncher(), cfg, recompute=[1])
    assert all(m.failure is None for m in run.measurements), run.measurements
    for rec in run.records.values():
        spans = []
        for phase in (0, 1):
            _, t0, t1 = next(st for st in rec["steps"] if st[0] == phase)
            f = sum(e - s for k, _, s, e in rec["events"] if k == "F" and t0 <= s < t1)
            b = sum(e - s for k, _, s, e in rec["events"] if k == "B" and t0 <= s < t1)
            spans.append((f, b))
        (f0, b0), (f1, b1) = spans
        assert f0 > 0.005 and abs(f1 - f0) < 0.25 * f0, spans
        assert abs((b1 - b0) - f1) < 0.25 * f1, spans  # the backward re-ran the forward


def test_recompute_with_tuner_or_bad_index_is_refused() -> None:
    model = mlp()
    plans = [make_plan(2, 1, "gpipe", 1, 1, [8])]
    cfg = PipelineConfig(ExecutorConfig(compute="real", warmup=0, iterations=1))
    with pytest.raises(ValueError, match="recompute"):
        run_pipeline(model, two_by_two(), plans, LocalLauncher(), cfg, recompute=[1])
    with pytest.raises(ValueError, match="recompute"):
        run_pipeline(model, two_by_two(), plans, LocalLauncher(), cfg, TunerRun(steps=2), recompute=[0])
