"""torchrun's rank entry: ``torchrun ... -m runtime.agent.rank_main --job JOB --node-rank R``.

torchrun gives LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT (its agent's store) and
TORCHELASTIC_RUN_ID. The rank of a process in the executor's layout (workers in ClusterSpec
device order, then one PS server per node: ``RankLayout``) is derived from the gang's node rank
(the agent's slot, passed as ``--node-rank``; c10d rendezvous may number the torchrun nodes
differently) and LOCAL_RANK: local ranks ``0..G-1`` are the node's GPUs, local rank G its server.
The process group is initialised through torchrun's store with that rank, a ``Context`` is built
as ``runtime.executor.worker_main`` builds it, and ``run_trial`` runs the one trial (or, for a
search that names a model factory, ``user_model.run_user_trial`` runs the user's module); the layout's
coordinator gathers every rank's result and writes it to the job's ``result`` path.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and the executor are imported in main(), after the watchdog is up
    import torch

    from runtime.executor.config import ExecutorConfig
    from runtime.executor.layout import RankLayout

PR_SET_PDEATHSIG = 1
AGENT_PID_ENV = "STRATEGIST_AGENT_PID"


def die_with_parent(poll_s: float = 0.2) -> None:
    """End this process when its agent dies (an agent killed takes its ranks along).

    PR_SET_PDEATHSIG is set (Linux), but not relied on: measured here (a sandboxed kernel), a child
    outlived its SIGKILLed parent with the signal set, and a rank's parent is torchrun, not the
    agent. So a watchdog thread also polls the agent's pid (``STRATEGIST_AGENT_PID``, which
    torchrun passes on in the environment) and torchrun's, and exits once either is gone.

    It runs before torch is imported: importing torch and the executor takes a rank 10-30 s on a
    loaded 2-core host, and an agent killed meanwhile left ranks running past the heartbeat
    timeout (the 10-kills test, kill 1, 2026-12-06) when the watchdog only started after it.
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    watched = [os.getppid()]
    if os.environ.get(AGENT_PID_ENV, "").isdigit():
        watched.append(int(os.environ[AGENT_PID_ENV]))

    def watch() -> None:
        while True:
            for pid in watched:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    os._exit(1)
                except PermissionError:
                    pass
            time.sleep(poll_s)

    threading.Thread(target=watch, daemon=True, name="die-with-agent").start()


def nproc(layout: RankLayout, node: int) -> int:
    """Processes torchrun starts on ``node``: one per GPU and the node's PS server."""
    return len(layout.node_workers[node]) + 1


def layout_rank(layout: RankLayout, node: int, local: int) -> int:
    """The executor rank of local process ``local`` on gang node ``node``."""
    workers = layout.node_workers[node]
    if local < len(workers):
        return workers[local]
    if local == len(workers):
        return layout.server_rank(node)
    raise ValueError(f"node {node} runs {nproc(layout, node)} processes, not local rank {local}")


def _device(cfg: ExecutorConfig, layout: RankLayout, rank: int, local: int) -> torch.device:
    import torch

    if cfg.backend != "nccl" or not layout.is_worker(rank):
        return torch.device("cpu")
    if local >= torch.cuda.device_count():
        raise RuntimeError(
            f"rank {rank} needs CUDA device {local} but this node has {torch.cuda.device_count()}"
        )
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    return dev


def main(argv: list[str] | None = None) -> None:
    die_with_parent()
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--job", required=True, type=Path)
    ap.add_argument("--node-rank", required=True, type=int)
    args = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    from runtime.executor.config import ExecutorConfig
    from runtime.executor.groups import build_groups
    from runtime.executor.layout import RankLayout
    from runtime.executor.worker import Context, run_trial
    from simulator.spec import ClusterSpec, ModelSpec, Strategy
    from simulator.spec.profile import Profile

    torch.set_num_threads(1)
    job = json.loads(args.job.read_text())
    model = ModelSpec.model_validate(job["model"])
    cluster = ClusterSpec.model_validate(job["cluster"])
    cfg = ExecutorConfig.from_json(json.dumps(job["config"]))
    profiles = tuple(Profile.model_validate(p) for p in job.get("profiles", []))
    strategy = Strategy.model_validate(job["strategy"])
    layout = RankLayout(cluster)
    world = int(os.environ["WORLD_SIZE"])
    if world != layout.world:
        raise RuntimeError(f"torchrun started {world} processes, the layout needs {layout.world}")
    local = int(os.environ["LOCAL_RANK"])
    rank = layout_rank(layout, args.node_rank, local)
    dist.init_process_group(
        "gloo",
        init_method="env://",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=cfg.timeout_s + 60),
    )
    groups = build_groups(layout, rank, cfg.backend, _device(cfg, layout, rank, local))
    ctx = Context(model, cluster, cfg, layout, rank, groups, profiles)
    dist.barrier()
    if job.get("model_factory"):  # the search's own model (runtime/executor/user_model.py)
        from runtime.executor.user_model import run_user_trial

        result = run_user_trial(ctx, int(job["trial"]), strategy, str(job["model_factory"]))
    else:
        result = run_trial(ctx, int(job["trial"]), strategy)
    coordinator = layout.coordinator
    gathered: list[object] | None = [None] * world if rank == coordinator else None
    dist.gather_object(result, gathered, dst=coordinator)
    if rank == coordinator:
        out = {"ranks": gathered, "run_id": os.environ.get("TORCHELASTIC_RUN_ID", "")}
        Path(job["result"]).write_text(json.dumps(out))
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
