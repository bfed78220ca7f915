"""Plans that do not fit are refused before any process group is touched, naming what differs."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from runtime.apply import (
    JobShape,
    PlanMismatch,
    apply_plan,
    check_job,
    load_plan,
    sync_plan_file,
    write_plan_file,
)
from runtime.apply.checks import check_sync_supported
from runtime.executor.reference import correctness_cases, tiny_model, two_by_two
from simulator.extract import extract_model
from simulator.spec import CollectiveSync, Strategy, VariableStrategy
from simulator.spec.planfile import PlanFile


def mlp(hidden: int = 16) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 4))


def ring_plan(module: nn.Module) -> PlanFile:
    spec = extract_model(module, torch.zeros(2, 8), name="mlp", batch_size=2)
    strategy = Strategy(
        variables=tuple(
            VariableStrategy(variable=v.name, shards=(CollectiveSync(group=0),)) for v in spec.variables
        )
    )
    return sync_plan_file(strategy, spec, two_by_two())


ENV = {"WORLD_SIZE": "4", "RANK": "1", "LOCAL_WORLD_SIZE": "2"}


def refused(module: nn.Module, plan: PlanFile, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(PlanMismatch) as e:
        apply_plan(module, plan)
    assert not dist.is_initialized()  # refused before any process group was touched
    return str(e.value)


def test_a_plan_for_another_shape_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = refused(mlp(hidden=32), ring_plan(mlp(hidden=16)), ENV, monkeypatch)
    assert msg == "variable '0.weight': the plan has shape (16, 8), this module (32, 8)"


def test_a_plan_for_another_model_names_the_missing_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    other = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4, bias=False))
    msg = refused(other, ring_plan(mlp()), ENV, monkeypatch)
    assert msg == "variable '2.bias': in the plan (model 'mlp') but not in this module"


def test_an_extra_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    bigger = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4), nn.Linear(4, 4))
    msg = refused(bigger, ring_plan(mlp()), ENV, monkeypatch)
    assert msg == "variable '3.weight': in this module but not in the plan (model 'mlp')"


def test_another_world_size_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = refused(mlp(), ring_plan(mlp()), {**ENV, "WORLD_SIZE": "2"}, monkeypatch)
    assert msg == "world size: the plan is for 4 processes (2 nodes, 4 GPUs), this job has 2"


def test_another_process_count_on_a_node_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = refused(mlp(), ring_plan(mlp()), {**ENV, "LOCAL_WORLD_SIZE": "4"}, monkeypatch)
    assert msg.startswith("node 'n0': the plan runs 2 processes there")


def test_a_missing_gpu_is_named() -> None:
    plan = ring_plan(mlp())
    have = torch.cuda.device_count()
    if have >= 2:
        pytest.skip("this host has the GPUs the plan needs")
    with pytest.raises(PlanMismatch, match=r"missing device: rank 1 needs cuda:1 on node 'n0'"):
        check_job(plan, JobShape(4, 1, 2), "nccl")


def test_no_launcher_environment_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(PlanMismatch, match="WORLD_SIZE: not set; run under torchrun"):
        apply_plan(mlp(), ring_plan(mlp()))


def test_a_ps_plan_is_refused_naming_the_shard() -> None:
    model = tiny_model()
    strategy, _ = correctness_cases(model, "n0", "n1")["ps-split-servers"]
    plan = sync_plan_file(strategy, model, two_by_two())
    with pytest.raises(PlanMismatch, match=r"variables\.\S+\.shards\.\d+: parameter-server shards"):
        check_sync_supported(plan)


def test_the_plan_file_round_trips_and_rejects_a_wrong_fingerprint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plan = ring_plan(mlp())
    write_plan_file(plan, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json") == plan
    doc = plan.model_dump(mode="json")
    doc["fingerprint"] = "0" * 64
    with pytest.raises(ValueError, match=r"fingerprint: 0+ does not match the variables"):
        PlanFile.model_validate(doc)
    doc = plan.model_dump(mode="json")
    doc["world_size"] = 3
    with pytest.raises(ValueError, match="world_size: 3 but the cluster has 4 GPUs"):
        PlanFile.model_validate(doc)


# -- pipeline, hybrid and heterogeneous plans: refused by name ------------------------------------


def other_kind(pf: PlanFile, kind: str, plan: dict[str, object]) -> PlanFile:
    return PlanFile.model_validate({**pf.model_dump(), "kind": kind, "plan": plan, "fingerprint": ""})


def two_stage_doc(pf: PlanFile, devices: tuple[tuple[str, ...], tuple[str, ...]]) -> dict[str, object]:
    from runtime.worker.plan_pipeline import PipelineTrial
    from simulator.spec import Plan, Stage

    stages = tuple(
        Stage(first_layer=i, last_layer=i + 1, devices=d, replicate=len(d)) for i, d in enumerate(devices)
    )
    shares = {d: 4 for d in devices[0]}
    plan = Plan(stages=stages, global_batch=8, micro_batch_size=2, num_micro_batches=4, batch_shares=shares)
    return PipelineTrial(candidates=(plan,)).model_dump(mode="json")


def test_a_pipeline_plan_needs_a_sequential_cut_between_children(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    module = mlp()
    pf = ring_plan(module)
    doc = two_stage_doc(pf, (("n0:0", "n0:1"), ("n1:0", "n1:1")))
    pp = other_kind(pf, "pipeline", doc)

    # the same children and parameter names, but not an nn.Sequential: nothing says the forward order
    not_seq = nn.Module()
    for name, child in module.named_children():
        not_seq.add_module(name, child)
    assert "is a Module" in refused(not_seq, pp, ENV, monkeypatch)
    # replica 0 on ranks 2 (stage 0) and 0 (stage 1): the stage order would not follow the ranks
    bad = other_kind(pf, "pipeline", two_stage_doc(pf, (("n1:0", "n1:1"), ("n0:0", "n0:1"))))
    assert "replica 0: its stages run on ranks [2, 0]" in refused(mlp(), bad, ENV, monkeypatch)


def test_hybrid_split_and_heterogeneous_plans_are_refused_by_name(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from simulator.spec.hybrid import HybridPlan, TaskGraph, VirtualDevice

    module = mlp()
    pf = ring_plan(module)
    devices = ("n0:0", "n0:1", "n1:0", "n1:1")
    split = HybridPlan(
        task_graphs=(
            TaskGraph(
                first_layer=0,
                last_layer=2,
                primitive="split",
                degree=4,
                virtual_devices=(VirtualDevice.on(pf.cluster, devices),),
            ),
        ),
        global_batch=8,
    )
    msg = refused(module, other_kind(pf, "hybrid", split.model_dump(mode="json")), ENV, monkeypatch)
    assert msg.startswith("task_graphs.0: split(4); tensor-split TaskGraphs are not applied")
    het = other_kind(pf, "heterogeneous", {"anything": 1})
    assert "heterogeneous plan" in refused(module, het, ENV, monkeypatch)
