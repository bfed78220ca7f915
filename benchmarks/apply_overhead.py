"""Step time of apply_plan (a plain all-reduce plan) against DistributedDataParallel, same processes.

``python benchmarks/apply_overhead.py [--procs 2] [--repeats 15] [--steps 10] [--width 512]
[--depth 4] [--batch 32] [--groups 1]`` re-runs itself under torchrun (gloo, one host). Every rank
builds the same MLP twice: one copy wrapped by ``runtime.apply.apply_plan`` with a plain
all-reduce plan (every variable ring all-reduced, no compression, in ``--groups`` merge groups of
contiguous variables, each one fused buffer), the other by
``torch.nn.parallel.DistributedDataParallel`` (defaults: a 1 MB first bucket, then 25 MB buckets,
so DDP overlaps its first bucket with backward where one merge group cannot). Repeats are interleaved
(the two alternate, and which goes first alternates too) so that load on this shared machine hits
both alike; each repeat times ``--steps`` full steps (forward, backward with synchronisation,
SGD step) after a barrier, and rank 0 prints the per-repeat ratio apply/DDP, its median and a
bootstrap 95 % interval of the median (10 000 resamples), plus each side's median step time.
Both copies start from the same weights and see the same batches, so the script also checks that
they end equal (the ratio compares equal work).
"""

from __future__ import annotations

import argparse
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


def allreduce_plan(model: nn.Module, width: int, batch: int, procs: int, groups: int):  # type: ignore[no-untyped-def]
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
    # Merge group i holds the i-th of ``groups`` contiguous runs of variables (forward order).
    ring = tuple(
        VariableStrategy(variable=v.name, shards=(CollectiveSync(group=i * groups // n, algorithm="ring"),))
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
    from runtime.apply import apply_plan

    torch.set_num_threads(1)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)  # both sides of the comparison alike
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    plan = allreduce_plan(mlp(args.width, args.depth), args.width, args.batch, world, args.groups)
    ours = apply_plan(mlp(args.width, args.depth), plan)  # initialises the process group
    ddp = nn.parallel.DistributedDataParallel(mlp(args.width, args.depth))
    opt_ours = torch.optim.SGD(ours.parameters(), lr=0.01)
    opt_ddp = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(100 + rank)
    data = [
        (torch.randn(args.batch, args.width, generator=gen), torch.randn(args.batch, 1, generator=gen))
        for _ in range(args.steps)
    ]
    timed(ours, opt_ours, data[:2])  # warm-up both (first-call costs, thread start)
    timed(ddp, opt_ddp, data[:2])
    t_ours: list[float] = []
    t_ddp: list[float] = []
    for r in range(args.repeats):
        if r % 2 == 0:
            t_ours.append(timed(ours, opt_ours, data))
            t_ddp.append(timed(ddp, opt_ddp, data))
        else:
            t_ddp.append(timed(ddp, opt_ddp, data))
            t_ours.append(timed(ours, opt_ours, data))
    a = ours.state_dict()
    b = ddp.module.state_dict()
    same = all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a)
    # Every rank's times matter (a step ends when the slowest rank's does): take the max per repeat.
    both = torch.tensor([t_ours, t_ddp], dtype=torch.float64)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    if rank == 0:
        ours_s, ddp_s = both[0].numpy(), both[1].numpy()
        ratio = ours_s / ddp_s
        lo, hi = bootstrap_median(ratio)
        params = sum(p.numel() for p in ours.parameters())
        switch = f", switch interval {sys.getswitchinterval() * 1e3:g} ms"
        print(f"procs {world}{switch}, MLP {args.depth}x{args.width} ({params / 1e6:.2f} M params), batch {args.batch}/rank, "
              f"{args.repeats} repeats x {args.steps} steps, gloo, one host")  # fmt: skip
        print("| | median step ms | ratio apply/DDP (median [95 % CI]) |")
        print("|---|---|---|")
        print(f"| apply_plan ({args.groups} ring group(s)) | {statistics.median(ours_s) * 1e3:.2f} | "
              f"{np.median(ratio):.3f} [{lo:.3f}, {hi:.3f}] |")  # fmt: skip
        print(f"| DDP (25 MB buckets) | {statistics.median(ddp_s) * 1e3:.2f} | 1 |")
        print(f"final parameters equal: {same}")
    ours.close()
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
    ap.add_argument("--groups", type=int, default=1, help="ring merge groups (contiguous runs of variables)")
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
