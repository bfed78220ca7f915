"""Step time of apply_plan (a plain all-reduce plan) against DistributedDataParallel, same processes.

``python benchmarks/apply_overhead.py [--procs 2] [--repeats 15] [--steps 10] [--width 512]
[--depth 4] [--batch 32] [--groups ddp|N] [--no-channel]`` re-runs itself under torchrun (gloo, one
host). Every rank builds the same MLP three times:

- ``apply``: ``runtime.apply.apply_plan`` with a plain all-reduce plan (every variable ring
  all-reduced, no compression). ``--groups ddp`` (the default) puts the variables in the merge
  groups DDP's reducer uses for this model (``dist._compute_bucket_assignment_by_size`` over the
  parameters in backward order with DDP's 1 MB first and 25 MB later caps, i.e. DDP's buckets after
  its first-iteration rebuild), so both sides fuse and overlap the same buckets; ``--groups N``:
  N merge groups of contiguous variables. Plain units start with ``async_op=True`` from the
  gradient hook (``runtime/executor/engine.py``).
- ``channel``: the same, with every unit sent to the engine's collective channel thread (the
  engine's path for chains such as hierarchical all-reduce, and the only path before 2026-12-06):
  the old path, measured beside the new one (``--no-channel`` skips it).
- ``DDP``: ``torch.nn.parallel.DistributedDataParallel`` with its defaults.

Repeats are interleaved (the copies take turns, and the order rotates through every permutation)
so that load on this shared machine hits all alike; each repeat times ``--steps`` full steps
(forward, backward with synchronisation, SGD step) after a barrier, the max over ranks per repeat
counts (a step ends when the slowest rank's does), and rank 0 prints each copy's median step time
and the per-repeat ratios' median with a bootstrap 95 % interval of the median (10 000 resamples).
All copies start from the same weights and see the same batches, so the script also checks that
they end equal (the ratio compares equal work).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlp(width: int, depth: int) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def ddp_groups(model: nn.Module) -> list[int]:
    """Each parameter's (forward order) DDP bucket, as DDP's reducer builds them after iteration 1."""
    params = list(model.parameters())
    backward = params[::-1]  # the order gradients become ready in (what DDP's rebuild uses)
    caps = [dist_default_first_bucket(), 25 * 1024 * 1024]
    buckets, _ = torch.distributed._compute_bucket_assignment_by_size(backward, caps, [False] * len(params))  # type: ignore[attr-defined]
    group = [0] * len(params)
    for b, members in enumerate(buckets):
        for i in members:
            group[len(params) - 1 - i] = b
    return group


def dist_default_first_bucket() -> int:
    return int(getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", 1024 * 1024))


def allreduce_plan(model: nn.Module, width: int, batch: int, procs: int, groups: str):  # type: ignore[no-untyped-def]
    from runtime.executor.reference import GPU
    from simulator.extract import extract_model
    from simulator.spec import ClusterSpec, CollectiveSync, Node, Strategy, VariableStrategy
    from simulator.spec.planfile import sync_plan_file

    spec = extract_model(model, torch.zeros(batch, width), name="mlp", batch_size=batch)
    cluster = ClusterSpec(
        name=f"1x{procs}",
        device_types=(GPU,),
        intra_node_gbps=100.0,
        nodes=(Node(name="n0", device=GPU.name, gpus=procs, nic_gbps=10.0),),
    )
    n = len(spec.variables)
    if groups == "ddp":
        names = [name for name, _ in model.named_parameters()]
        assert names == [v.name for v in spec.variables]
        of = ddp_groups(model)
    else:  # merge group i holds the i-th of ``groups`` contiguous runs of variables (forward order)
        of = [i * int(groups) // n for i in range(n)]
    ring = tuple(
        VariableStrategy(variable=v.name, shards=(CollectiveSync(group=of[i], algorithm="ring"),))
        for i, v in enumerate(spec.variables)
    )
    return sync_plan_file(Strategy(variables=ring), spec, cluster)


def timed(
    model: nn.Module, opt: torch.optim.Optimizer, data: list[tuple[torch.Tensor, torch.Tensor]]
) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return (time.perf_counter() - t0) / len(data)


def bootstrap_median(values: np.ndarray, n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(values, size=(n, len(values)), replace=True), axis=1)
    lo, hi = np.quantile(meds, [0.025, 0.975])
    return float(lo), float(hi)


def rank_main(args: argparse.Namespace) -> None:
    from runtime.apply import PlannedModule, apply_plan

    torch.set_num_threads(1)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)  # every side of the comparison alike
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    plan = allreduce_plan(mlp(args.width, args.depth), args.width, args.batch, world, args.groups)
    models: dict[str, nn.Module] = {}
    models["apply"] = apply_plan(mlp(args.width, args.depth), plan)  # initialises the process group
    if not args.no_channel:
        channel = apply_plan(mlp(args.width, args.depth), plan)
        assert isinstance(channel, PlannedModule)
        channel.sync.engine.direct = frozenset()  # every unit on the collective channel thread
        models["channel"] = channel
    models["DDP"] = nn.parallel.DistributedDataParallel(mlp(args.width, args.depth))
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
    gen = torch.Generator().manual_seed(100 + rank)
    data = [
        (torch.randn(args.batch, args.width, generator=gen), torch.randn(args.batch, 1, generator=gen))
        for _ in range(args.steps)
    ]
    for k, m in models.items():  # warm-up (first-call costs, thread start, DDP's bucket rebuild)
        timed(m, opts[k], data[:3])
    names = list(models)
    orders = list(itertools.permutations(names))
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(args.repeats):
        for k in orders[r % len(orders)]:
            times[k].append(timed(models[k], opts[k], data))
    ref = models["DDP"].module.state_dict()  # type: ignore[operator]
    same = {
        k: all(torch.allclose(m.state_dict()[p], ref[p], rtol=1e-4, atol=1e-6) for p in ref)
        for k, m in models.items()
        if k != "DDP"
    }
    ddp_buckets = models["DDP"]._get_ddp_logging_data().get("rebuilt_bucket_sizes")  # type: ignore[operator]
    ours = models["apply"]
    assert isinstance(ours, PlannedModule)
    plan_buckets = [
        sum(ours.sync.plan.shards[s].numel * 4 for s in u.shards)
        for u in ours.sync.plan.units  # type: ignore[union-attr]
    ]
    # Every rank's times matter (a step ends when the slowest rank's does): take the max per repeat.
    both = torch.tensor([times[k] for k in names], dtype=torch.float64)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    if rank == 0:
        t = {k: both[i].numpy() for i, k in enumerate(names)}
        params = sum(p.numel() for p in ours.parameters())
        switch = f", switch interval {sys.getswitchinterval() * 1e3:g} ms"
        print(f"procs {world}{switch}, MLP {args.depth}x{args.width} ({params / 1e6:.2f} M params), batch {args.batch}/rank, "
              f"{args.repeats} repeats x {args.steps} steps, gloo, one host")  # fmt: skip
        print(f"plan merge groups ({args.groups}), bytes in launch order: {plan_buckets}; "
              f"DDP's rebuilt buckets (its logging data): {ddp_buckets}")  # fmt: skip
        print("| copy | median step ms | ratio to DDP, median [95 % CI] |")
        print("|---|---|---|")
        for k in names:
            ratio = t[k] / t["DDP"]
            lo, hi = bootstrap_median(ratio)
            print(
                f"| {k} | {statistics.median(t[k]) * 1e3:.2f} | {np.median(ratio):.3f} [{lo:.3f}, {hi:.3f}] |"
            )
        if "channel" in t:
            ratio = t["apply"] / t["channel"]
            lo, hi = bootstrap_median(ratio)
            print(f"apply / channel (new path / old path): {np.median(ratio):.3f} [{lo:.3f}, {hi:.3f}]")
        print(f"final parameters equal to DDP's: {same}")
    for m in models.values():
        if isinstance(m, PlannedModule):
            m.close()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument(
        "--switch-interval", type=float, default=0.0, help="sys.setswitchinterval, s (0: Python's 5 ms)"
    )
    ap.add_argument("--groups", default="ddp", help="'ddp' (DDP's buckets) or N contiguous runs of variables")
    ap.add_argument("--no-channel", action="store_true", help="skip the old path (every unit on a thread)")
    args = ap.parse_args()
    if "RANK" in os.environ:
        rank_main(args)
        return
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.procs),
           os.path.abspath(__file__), *sys.argv[1:]]  # fmt: skip
    sys.exit(subprocess.call(cmd, env=env))


if __name__ == "__main__":
    main()
