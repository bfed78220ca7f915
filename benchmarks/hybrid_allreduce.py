"""The hybrid executor's DP gradient all-reduce, isolated on the testbed (issue 19).

``python benchmarks/hybrid_allreduce.py [--repeats 5] [--mb 8.4,16.8,33.6,67.2] [--skew 0,0.268]
[--procs 4,2] [--loopback]`` (needs root for the testbed's namespaces).

What it runs: the processes ``runtime.hybrid.worker`` runs for a data-parallel plan on the
2 V100 + 2 P100 testbed of ``benchmarks/heterogeneous_balance.py`` (two nodes, 50 Gbit/s NICs,
links shaped to 50 Gbit/s / 80 = 625 Mbit/s each way), doing nothing but what the worker does
after its backward: one gloo all-reduce (sum) of a float32 buffer of the step's scaled gradient
bytes, every rank entering after a barrier. One factor at a time:

* bytes (``--mb``, megabytes actually sent per rank): BERT-large's 1344 MB of gradients / 40 (the
  benchmark's bytes scale at dilation 2) is 33.6 MB; dilation D sends 1344 / (80 / D) MB over the
  same links, so varying the bytes is varying the dilation;
* process count (``--procs``): 4 (two per node, as the plan) or 2 (one per node);
* arrival skew (``--skew``, seconds): the second node's ranks enter that much later (the even
  plan's P100s finish their backward 0.134 s x D = 0.268 s after the V100s);
* idle time before the call (``--idle``, seconds every rank sleeps after the barrier, as the
  replayed compute does; TCP may restart slow start after an idle connection);
* where the buffer is allocated (``--alloc``): before the barrier, or inside the timed call as
  the worker did before commit f3cfd03 (a fresh ``torch.zeros`` per step; glibc maps buffers
  above its mmap threshold, at most 32 MiB, anew on every allocation, so they page-fault again);
* the network (``--loopback``): the same processes on unshaped loopback (no namespaces): the host
  CPU's share alone.

Per call it records each rank's entry and exit (``time.monotonic``, one clock for all namespaces)
and its process CPU seconds (all threads: gloo's I/O included). Printed per configuration: the
median over repeats of the time from the LAST entry to the last exit (what the benchmark's
diagnostic called "all-reduce after the last arrival") and from the first entry, the ring's
bandwidth term ``2 (n - 1) / n x bytes / link rate`` (Eq. 3's transfer term, the cost model's
prediction without latency), their ratio, and the CPU seconds per call summed over ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NIC_GBPS = 50.0
LINK_SCALE = 80.0  # suggest_scale of the 2+2 cluster: 625 Mbit/s per link


def worker(argv: list[str]) -> None:
    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    plan = json.loads(a.plan)
    dist.init_process_group(
        "gloo", init_method=f"tcp://{a.master}:{a.port}", rank=a.rank, world_size=a.world,
        timeout=timedelta(seconds=300),
    )  # fmt: skip
    group = dist.new_group(list(range(a.world)))  # the worker's DP group is a new_group too
    late = set(plan["late"])
    rows = []
    for cfg_i, (nbytes, skew, idle) in enumerate(plan["configs"]):
        for rep in range(plan["warmup"] + plan["repeats"]):
            if not plan["alloc_inside"]:
                buf = torch.zeros(max(1, int(nbytes) // 4))
            dist.barrier()
            time.sleep(idle + (skew if a.rank in late else 0.0))
            c0, t0 = time.process_time(), time.monotonic()
            if plan["alloc_inside"]:  # as the worker did before f3cfd03: a fresh buffer per step
                buf = torch.zeros(max(1, int(nbytes) // 4))
            dist.all_reduce(buf, group=group)
            t1, c1 = time.monotonic(), time.process_time()
            if rep >= plan["warmup"]:
                rows.append((cfg_i, rep, t0, t1, c1 - c0))
    Path(a.out, f"rank{a.rank}.json").write_text(json.dumps(rows))
    dist.barrier()
    dist.destroy_process_group()


def run_session(
    launcher, nodes: list[int], configs, repeats: int, late: list[int], alloc_inside: bool = False
) -> list[dict]:  # type: ignore[no-untyped-def]
    from runtime.hybrid.run import _free_port

    world = len(nodes)
    with tempfile.TemporaryDirectory(prefix="hybrid-allreduce-") as tmp:
        plan = json.dumps(
            {"configs": configs, "repeats": repeats, "warmup": 1, "late": late, "alloc_inside": alloc_inside}
        )
        port = _free_port()
        procs = [
            launcher.spawn(
                node,
                [sys.executable, __file__, "worker", "--rank", str(r), "--world", str(world),
                 "--master", launcher.address(nodes[0]), "--port", str(port), "--plan", plan, "--out", tmp],
                {"PYTHONPATH": str(ROOT)},
            )
            for r, node in enumerate(nodes)
        ]  # fmt: skip
        for pr in procs:
            if pr.wait(timeout=1800) != 0:
                raise RuntimeError(f"worker exited {pr.returncode}")
        per_rank = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
    out = []
    for ci, (nbytes, skew, idle) in enumerate(configs):
        last, first, cpu = [], [], []
        reps = sorted({row[1] for row in per_rank[0] if row[0] == ci})
        for rep in reps:
            rs = [next(row for row in rows if row[0] == ci and row[1] == rep) for rows in per_rank]
            end = max(row[3] for row in rs)
            last.append(end - max(row[2] for row in rs))
            first.append(end - min(row[2] for row in rs))
            cpu.append(sum(row[4] for row in rs))
        out.append({"bytes": nbytes, "skew": skew, "idle": idle, "last": last, "first": first, "cpu": cpu})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mb", default="8.4,16.8,33.6,67.2", help="megabytes per rank, comma-separated")
    ap.add_argument("--skew", default="0,0.268", help="seconds the second node's ranks enter late")
    ap.add_argument(
        "--idle", default="0", help="seconds every rank sleeps before the call (replayed compute)"
    )
    ap.add_argument("--procs", default="4,2", help="process counts: 4 (two per node) and/or 2")
    ap.add_argument(
        "--alloc",
        default="before",
        help="before,inside: buffer allocated before the barrier or in the timed call",
    )
    ap.add_argument("--loopback", action="store_true", help="also run on unshaped loopback")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from heterogeneous_balance import P100, V100, two_types

    from runtime.executor import LocalLauncher
    from runtime.testbed import make_launcher

    cluster = two_types(V100, 2, P100, 2, "V100x2+P100x2")
    rate = NIC_GBPS * 1e9 / LINK_SCALE / 8  # bytes/s per link and direction
    configs = [
        (float(mb) * 1e6, float(s), float(i))
        for mb in args.mb.split(",")
        for s in args.skew.split(",")
        for i in args.idle.split(",")
    ]
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; uptime: {os.popen('uptime').read().strip()}"
    )
    print(
        f"# links {rate * 8 / 1e6:.0f} Mbit/s each way; {args.repeats} repeats after 1 warm-up; times are DILATED (wall) seconds"
    )
    print(f"{'network':<9} {'alloc':<6} {'procs':>5} {'MB/rank':>8} {'skew s':>7} {'idle s':>6} {'from last in':>13} {'from first in':>13} "
          f"{'ring term':>9} {'last/term':>9} {'CPU s/call':>10}")  # fmt: skip
    nets = [("shaped", True)] + ([("loopback", False)] if args.loopback else [])
    for net, shaped in nets:
        for procs, alloc in ((int(p), al) for p in args.procs.split(",") for al in args.alloc.split(",")):
            nodes = [0, 0, 1, 1] if procs == 4 else [0, 1]
            late = [r for r, n in enumerate(nodes) if n == 1]
            if shaped:
                with make_launcher(cluster, LINK_SCALE, allow_fallback=False) as launcher:
                    res = run_session(launcher, nodes, configs, args.repeats, late, alloc == "inside")
            else:
                res = run_session(LocalLauncher(), nodes, configs, args.repeats, late, alloc == "inside")
            for r in res:
                term = 2 * (procs - 1) / procs * r["bytes"] / rate
                last = statistics.median(r["last"])
                print(
                    f"{net:<9} {alloc:<6} {procs:>5} {r['bytes'] / 1e6:8.1f} {r['skew']:7.3f} {r['idle']:6.2f} {last:13.3f} "
                    f"{statistics.median(r['first']):13.3f} {term:9.3f} {last / term:9.2f} "
                    f"{statistics.median(r['cpu']):10.3f}"
                )
                sys.stdout.flush()
    print(f"# end {time.strftime('%H:%M UTC', time.gmtime())}; uptime: {os.popen('uptime').read().strip()}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    else:
        main()
