"""Plain units (one flat ring all-reduce) start from the gradient hook and reuse their bucket, as DDP does.

One process (a world-1 gloo group), so the synchronised gradient is the process's own: any
difference from plain autograd is the bucket handling (reuse, gradients that are views of the
bucket, a mutation that reads another slice of it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn

from runtime.apply import PlannedModule, apply_plan
from runtime.executor.mutation import ENV as MUTATION_ENV
from runtime.executor.reference import GPU
from simulator.extract import extract_model
from simulator.spec import ClusterSpec, CollectiveSync, Node, Strategy, VariableStrategy
from simulator.spec.planfile import PlanFile, sync_plan_file


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))


def two_group_plan(module: nn.Module, groups: int = 2) -> PlanFile:
    """Every variable ring all-reduced; the first layer in merge group 1 (``groups=2``), the rest in 0."""
    spec = extract_model(module, torch.zeros(4, 8), name="mlp", batch_size=4)
    cluster = ClusterSpec(
        name="1x1",
        device_types=(GPU,),
        intra_node_gbps=100.0,
        nodes=(Node(name="n0", device=GPU.name, gpus=1, nic_gbps=10.0),),
    )
    strategy = Strategy(
        variables=tuple(
            VariableStrategy(
                variable=v.name,
                shards=(
                    CollectiveSync(group=int(groups == 2 and v.name.startswith("0.")), algorithm="ring"),
                ),
            )
            for v in spec.variables
        )
    )
    return sync_plan_file(strategy, spec, cluster)


@pytest.fixture
def one_process(tmp_path, monkeypatch) -> Iterator[None]:  # type: ignore[no-untyped-def]
    for k, v in {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen)) for _ in range(n)]


def grads(m: nn.Module) -> dict[str, torch.Tensor]:
    inner = m.module if isinstance(m, PlannedModule) else m
    return {k: p.grad.clone() for k, p in inner.named_parameters() if p.grad is not None}


def test_plain_units_go_direct_and_reuse_their_bucket(one_process) -> None:  # type: ignore[no-untyped-def]
    ours = apply_plan(mlp(), two_group_plan(mlp()))
    assert isinstance(ours, PlannedModule)
    engine = ours.sync.engine
    assert len(engine.plan.units) == 2 and engine.direct == frozenset({0, 1})
    ref = mlp()
    opt, opt_ref = torch.optim.SGD(ours.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    ptrs = []
    for x, y in batches(3):
        for m in (ours, ref):
            ((m(x) - y) ** 2).mean().backward()
        got = grads(ours)
        for k, g in grads(ref).items():
            torch.testing.assert_close(got[k], g, rtol=0, atol=0, msg=k)
        ptrs.append(sorted(b.data_ptr() for b in engine._buckets.values()))
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()
    assert len(ptrs[0]) == 2 and ptrs[0] == ptrs[1] == ptrs[2]  # one bucket per unit, allocated once
    for k, v in ref.state_dict().items():
        assert torch.equal(ours.state_dict()[k], v), k
    ours.close()


@pytest.mark.parametrize("set_to_none", [True, False])
def test_gradients_accumulate_across_backward_passes(one_process, set_to_none) -> None:  # type: ignore[no-untyped-def]
    """Two backward passes per step (no zero_grad between): the second adds to the first's synchronised
    gradient, which must not be the bucket the second pass overwrites."""
    ours = apply_plan(mlp(), two_group_plan(mlp()))
    ref = mlp()
    data = batches(6)
    for step in range(3):
        for x, y in data[2 * step : 2 * step + 2]:
            for m in (ours, ref):
                ((m(x) - y) ** 2).mean().backward()
        got = grads(ours)
        for k, g in grads(ref).items():
            torch.testing.assert_close(got[k], g, rtol=1e-6, atol=1e-7, msg=f"step {step}: {k}")
        for m in (ours, ref):
            m.zero_grad(set_to_none=set_to_none)
    ours.close()  # type: ignore[operator]


def test_the_swap_mutation_swaps_exactly_under_bucket_reuse(one_process, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """swap_shards hands "0.weight" the gradient of "2.weight" and back (one unit). With
    ``set_to_none=False`` autograd accumulates into the old ``param.grad``: were that a view of the
    reused bucket, filling the bucket would overwrite one of the pair before it is read."""
    monkeypatch.setenv(MUTATION_ENV, "swap_shards")
    ours = apply_plan(mlp(), two_group_plan(mlp(), groups=1))
    ref = mlp()
    for i, (x, y) in enumerate(batches(3)):
        for m in (ours, ref):
            ((m(x) - y) ** 2).mean().backward()
        got, want = grads(ours), grads(ref)
        torch.testing.assert_close(got["0.weight"], want["2.weight"], rtol=0, atol=0, msg=f"pass {i}")
        torch.testing.assert_close(got["2.weight"], want["0.weight"], rtol=0, atol=0, msg=f"pass {i}")
        torch.testing.assert_close(got["4.weight"], want["4.weight"], rtol=0, atol=0, msg=f"pass {i}")
        for m in (ours, ref):
            m.zero_grad(set_to_none=False)
    ours.close()  # type: ignore[operator]
