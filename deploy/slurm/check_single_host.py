"""Run deploy/slurm/agents.sbatch against a single-host Slurm and a factory search through torchrun.

Needs root and Debian's ``slurm-wlm`` (``apt-get install -y slurm-wlm``: slurmctld, slurmd, munge).
What it does, every step on this host:

1. starts ``munged`` (the package's key) and a throw-away Slurm: ``slurmctld`` and ``slurmd`` with a
   generated ``slurm.conf`` (this host, one partition) in a temporary folder. ``--nodes N`` > 1:
   N Slurm nodes ``n0..`` on this one host, each its own ``slurmd -N nI`` on its own port
   (``NodeHostname`` this host, ``NodeAddr`` 127.0.0.1; Debian's slurm-wlm 22.05.8 accepts
   ``slurmd -N`` and several NodeName lines on one host), so the allocation has N nodes;
2. starts strategist (API + search loop, no embedded worker) on an SQLite file;
3. ``sbatch --nodes N deploy/slurm/agents.sbatch``: ``srun`` starts one agent per allocated node
   (named by ``SLURMD_NODENAME``); the pool's cluster must have N nodes and every trial's
   torchrun gang must hold all N agents;
4. stores the agent pool as a cluster and creates a search through the API whose ``model_factory``
   is ``tests.runtime.agent.factory_models:tiny_lm`` (a transformer with tied embeddings); the
   search loop queues its baselines and candidates, the agent runs each trial with torchrun;
5. prints the trial count, the seconds the search took, each trial's median iteration time and
   peak RSS, then ``scancel``s the job and checks that no agent, torchrun or rank process and no
   job is left; stops what it started (by pid).

    python deploy/slurm/check_single_host.py [--nodes 2] [--budget 2] [--timeout 900] [--json out.json]

What this does not show: a real network between the Slurm nodes (both are this host, their
agents reach each other over the host's own address), or GPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FACTORY = "tests.runtime.agent.factory_models:tiny_lm"
POOL = "slurm-check"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(check: Any, timeout_s: float, what: str, poll_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(poll_s)
    raise RuntimeError(f"timed out waiting for {what}")


def node_names(nodes: int, host: str) -> list[str]:
    """Slurm node names: this host's name for one node, else ``n0..n{N-1}`` (all on this host)."""
    return [host] if nodes == 1 else [f"n{i}" for i in range(nodes)]


def slurm_conf(work: Path, host: str, cpus: int, mem_mb: int, nodes: int = 1) -> Path:
    names = node_names(nodes, host)
    for d in ("state", "log", *(f"spool/{n}" for n in names)):
        (work / d).mkdir(parents=True, exist_ok=True)
    if nodes == 1:
        node_lines = [f"NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN"]
    else:  # several slurmd on this host: one port each, found by address (slurmd -N name)
        node_lines = [f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} CPUs={cpus}"
                      f" RealMemory={mem_mb} State=UNKNOWN" for n in names]  # fmt: skip
    conf = work / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=strategistcheck",
                f"SlurmctldHost={host}",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                f"StateSaveLocation={work / 'state'}",
                f"SlurmdSpoolDir={work / 'spool' / '%n'}",
                f"SlurmctldPidFile={work / 'slurmctld.pid'}",
                f"SlurmdPidFile={work / 'slurmd.%n.pid'}",
                f"SlurmctldLogFile={work / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={work / 'log' / 'slurmd.%n.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "SchedulerType=sched/backfill",
                "ReturnToService=2",
                "MpiDefault=none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                *node_lines,
                f"PartitionName=check Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    return conf


def _pids_with(text: str, job: str) -> list[int]:
    """Live processes of Slurm job ``job`` (``SLURM_JOB_ID`` in their environment, which srun sets
    for the task and its children inherit) whose command line contains ``text``."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (p / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        try:
            environ = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if text in cmd and state != "Z" and f"SLURM_JOB_ID={job}".encode() in environ:
            out.append(int(p.name))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1, help="Slurm nodes (slurmd daemons) on this host.")
    ap.add_argument("--budget", type=int, default=2, help="Candidate trials of the search.")
    ap.add_argument("--timeout", type=float, default=900.0, help="Seconds the search may take.")
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None, help="Write the results here too.")
    args = ap.parse_args()
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: apt-get install -y slurm-wlm")

    from runtime.executor.user_model import factory_spec
    from service.db import repository as repo
    from service.loop.stack import Stack, StackConfig
    from service.settings import Settings

    work = Path(tempfile.mkdtemp(prefix="strategist-slurm-"))
    host = socket.gethostname().split(".")[0]
    started: list[subprocess.Popen[bytes]] = []
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    stack: Stack | None = None
    result: dict[str, Any] = {"host": host, "work": str(work), "slurm_nodes": node_names(args.nodes, host)}
    try:
        munge_sock = Path("/run/munge/munge.socket.2")
        if not munge_sock.exists():
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            with (work / "munged.log").open("wb") as log:  # the child keeps its own descriptor
                started.append(
                    subprocess.Popen(["munged", "--foreground", "--force"], stdout=log, stderr=log)
                )
            _wait(munge_sock.exists, 20, "munged")
        conf = slurm_conf(work, host, os.cpu_count() or 1, 4096, args.nodes)
        env["SLURM_CONF"] = str(conf)
        daemons = [("slurmctld", ["slurmctld"])] + [
            (f"slurmd-{n}", ["slurmd"] + (["-N", n] if args.nodes > 1 else []))
            for n in node_names(args.nodes, host)
        ]
        for label, argv in daemons:
            with (work / f"{label}.out").open("wb") as log:
                started.append(subprocess.Popen([*argv, "-D", "-f", str(conf)], env=env, stdout=log,
                                                stderr=subprocess.STDOUT))  # fmt: skip

        def all_idle() -> bool:
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True, text=True
            )
            states = dict(line.split() for line in out.stdout.strip().splitlines() if line.strip())
            return sorted(states) == sorted(node_names(args.nodes, host)) and set(states.values()) == {"idle"}

        _wait(all_idle, 60, "every Slurm node idle")

        settings = Settings(data_dir=work / "data", database_url=f"sqlite:///{work / 'api.db'}",
                            broker_url="memory://", heartbeat_timeout_s=15.0, api_host="127.0.0.1")  # fmt: skip
        stack = Stack(settings, StackConfig(embedded_worker=False, port=0, tick_s=0.5))
        stack.start()
        with stack.sessions() as s:
            worker = repo.create_token(s, name="agents", role="worker").secret
            alice = repo.create_token(s, name="alice", role="user")
        auth = {"Authorization": f"Bearer {alice.secret}"}
        (work / "executor.json").write_text(
            json.dumps({"iterations": args.iterations, "warmup": 1, "lr": 0.05})
        )
        wrapper = work / "strategist"
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -c "from service.cli import app; app()" "$@"\n')
        wrapper.chmod(0o755)
        job_env = {**env, "STRATEGIST_API": stack.url, "STRATEGIST_TOKEN": worker, "STRATEGIST_POOL": POOL,
                   "STRATEGIST_BIN": str(wrapper), "STRATEGIST_RDZV_PORT": str(_free_port()),
                   "STRATEGIST_AGENT_ARGS": f"--executor-json {work / 'executor.json'} --heartbeat-s 0.5"}  # fmt: skip
        sb = subprocess.run(["sbatch", "--parsable", "--nodes", str(args.nodes), "--output", str(work / "job-%j.out"),
                             str(ROOT / "deploy" / "slurm" / "agents.sbatch")],
                            env=job_env, capture_output=True, text=True, check=True, cwd=str(ROOT))  # fmt: skip
        job = sb.stdout.strip().split(";")[0]
        result["slurm_job"] = job
        print(f"sbatch: job {job}", flush=True)

        def cluster_stored() -> Any:
            r = httpx.post(
                f"{stack.url}/api/v1/agents/pools/{POOL}/cluster", json={}, headers=auth, timeout=30
            )
            return r.json() if r.status_code == 201 else None

        def every_agent() -> bool:  # looked at first: a stored cluster is kept under its name
            r = httpx.get(f"{stack.url}/api/v1/agents/pools/{POOL}/cluster", headers=auth, timeout=30)
            return r.status_code == 200 and len(r.json()["nodes"]) == args.nodes

        _wait(every_agent, 120, f"{args.nodes} agents registered (srun)", poll_s=1.0)
        cluster = _wait(cluster_stored, 30, "the pool's cluster stored", poll_s=1.0)
        result["pool_nodes"] = [n["name"] for n in cluster["spec"]["nodes"]]
        model = factory_spec(FACTORY, 4)
        with stack.sessions() as s:
            repo.store_spec(s, spec=model, owner_id=alice.info.user_id)
        t0 = time.monotonic()
        r = httpx.post(f"{stack.url}/api/v1/searches", headers=auth, timeout=30,
                       json={"model": model.name, "cluster": cluster["name"], "model_factory": FACTORY,
                             "trial_budget": args.budget, "candidates_per_round": 1, "samples_per_round": 20})  # fmt: skip
        r.raise_for_status()
        sid = r.json()["id"]

        def search_done() -> Any:
            body = httpx.get(f"{stack.url}/api/v1/searches/{sid}", headers=auth, timeout=30).json()
            return body if body["search"]["state"] in ("completed", "failed", "cancelled") else None

        done = _wait(search_done, args.timeout, "the search", poll_s=2.0)
        result["search_seconds"] = round(time.monotonic() - t0, 1)
        result["search_state"] = done["search"]["state"]
        trials = httpx.get(
            f"{stack.url}/api/v1/searches/{sid}/trials?limit=1000", headers=auth, timeout=30
        ).json()
        rows = []
        for t in trials["data"]:
            env_t = (t.get("measurement") or {}).get("environment") or {}
            rows.append({"trial": t["id"], "label": t["baseline"] or f"candidate {t['candidate_id']}",
                         "state": t["state"], "median_s": t.get("median_time"),
                         "peak_rss_mb": round(env_t.get("peak_memory_bytes", 0) / 2**20, 1),
                         "launcher": env_t.get("launcher"), "torchrun_run_id": env_t.get("torchrun_run_id"),
                         "agents": env_t.get("agents"), "failure": t.get("failure_reason")})  # fmt: skip
        result["trials"] = rows
        ok = [x for x in rows if x["state"] == "succeeded"]
        result["trials_succeeded"] = len(ok)
        # every successful trial's torchrun gang held one agent per Slurm node
        result["trials_on_every_node"] = sum(
            1 for x in ok if sorted(x["agents"] or []) == sorted(result["pool_nodes"])
        )
        if ok:
            result["median_of_medians_s"] = statistics.median(x["median_s"] for x in ok)
            result["max_peak_rss_mb"] = max(x["peak_rss_mb"] for x in ok)
        during = {k: len(_pids_with(k, job)) for k in ("app() agent",)}
        result["agents_seen_before_scancel"] = during["app() agent"]
        subprocess.run(["scancel", job], env=env, check=True)
        _wait(lambda: not subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True,
                                         text=True).stdout.strip(), 60, "the job gone after scancel")  # fmt: skip
        time.sleep(3)
        left = {
            k: _pids_with(k, job) for k in ("app() agent", "torch.distributed.run", "runtime.agent.rank_main")
        }
        result["left_after_scancel"] = {k: len(v) for k, v in left.items()}
        result["jobs_left"] = subprocess.run(
            ["squeue", "-h"], env=env, capture_output=True, text=True
        ).stdout.strip()
    finally:
        if stack is not None:
            stack.stop()
        for p in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    print(json.dumps(result, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
