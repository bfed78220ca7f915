"""Process entry point: ``python -m runtime.executor.worker_main --spec-dir D --rank R --master A --port P``
(``--cuda-index I``: the worker's GPU with the nccl backend).

Every process of a session runs this. It joins the session's process group (the TCPStore lives
in the coordinator, the lowest rank on node 0), creates the subgroups once, then runs trials
until told to close. The coordinator reads one JSON command per line from stdin (EOF = close),
publishes it to the others through the store, gathers every rank's result from the store and
prints ``@@RESULT <json>`` on stdout. Any error prints a traceback on stderr and exits non-zero:
the driver then kills the session (other ranks may be blocked in a collective).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from runtime.executor.config import ExecutorConfig
from runtime.executor.groups import build_groups
from runtime.executor.layout import RankLayout
from runtime.executor.worker import Context, run_trial
from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.profile import Profile

READY = "@@READY"
RESULT = "@@RESULT "


def _device(cfg: ExecutorConfig, layout: RankLayout, rank: int, cuda_index: int) -> torch.device:
    if cfg.backend != "nccl" or not layout.is_worker(rank):
        return torch.device("cpu")
    have = torch.cuda.device_count()
    if cuda_index >= have:
        # NCCL refuses two ranks on one GPU, so never wrap around.
        raise RuntimeError(f"rank {rank} needs CUDA device {cuda_index} but this host has {have}")
    dev = torch.device("cuda", cuda_index)
    torch.cuda.set_device(dev)
    return dev


PROFILES_FILE = "profiles.json"


def write_profiles(spec_dir: Path, profiles: tuple[Profile, ...]) -> None:
    """The replay's measured profiles as one JSON list in the session's spec folder."""
    (spec_dir / PROFILES_FILE).write_text(json.dumps([p.model_dump(mode="json") for p in profiles]))


def read_profiles(spec_dir: Path) -> tuple[Profile, ...]:
    """What ``write_profiles`` wrote (none when the file is absent)."""
    path = spec_dir / PROFILES_FILE
    if not path.exists():
        return ()
    return tuple(Profile.model_validate(p) for p in json.loads(path.read_text()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spec-dir", required=True, type=Path)
    ap.add_argument("--rank", required=True, type=int)
    ap.add_argument("--master", required=True)
    ap.add_argument("--port", required=True, type=int)
    ap.add_argument("--cuda-index", type=int, default=-1, help="this worker's GPU (nccl backend)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = ModelSpec.model_validate_json((args.spec_dir / "model.json").read_text())
    cluster = ClusterSpec.model_validate_json((args.spec_dir / "cluster.json").read_text())
    cfg = ExecutorConfig.from_json((args.spec_dir / "config.json").read_text())
    profiles = read_profiles(args.spec_dir)
    layout = RankLayout(cluster)
    rank = args.rank
    coordinator = rank == layout.coordinator
    store = dist.TCPStore(
        args.master,
        args.port,
        is_master=coordinator,
        timeout=timedelta(seconds=cfg.startup_timeout_s),
        wait_for_workers=False,
    )
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore("pg", store),
        rank=rank,
        world_size=layout.world,
        timeout=timedelta(seconds=cfg.timeout_s + 60),
    )
    groups = build_groups(layout, rank, cfg.backend, _device(cfg, layout, rank, args.cuda_index))
    ctx = Context(model, cluster, cfg, layout, rank, groups, profiles)
    dist.barrier()
    store.set_timeout(timedelta(days=7))  # idle between trials; the driver bounds each trial
    if coordinator:
        print(READY, flush=True)
    n = 0
    while True:
        if coordinator:
            line = sys.stdin.readline() or json.dumps({"cmd": "close"})
            store.set(f"cmd/{n}", line)
        else:
            line = store.get(f"cmd/{n}").decode()
        cmd = json.loads(line)
        if cmd["cmd"] == "close":
            break
        strategy = Strategy.model_validate(cmd["strategy"])
        result = run_trial(ctx, int(cmd["trial"]), strategy)
        store.set(f"res/{n}/{rank}", json.dumps(result))
        if coordinator:
            keys = [f"res/{n}/{r}" for r in range(layout.world)]
            store.wait(keys)
            ranks = [json.loads(store.get(k)) for k in keys]
            for k in keys:
                store.delete_key(k)
            print(RESULT + json.dumps({"trial": cmd["trial"], "ranks": ranks}), flush=True)
        n += 1
    # Let every rank read the close command before the store (in the coordinator) goes away.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)
