"""Drive a probe (runtime.testbed.probe) across a launcher's nodes and return rank 0's result."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from runtime.launch import Launcher


def run_probe(
    launcher: Launcher,
    patterns: Sequence[str],
    rank_nodes: Sequence[int],
    nbytes: int,
    *,
    iters: int = 5,
    warmup: int = 1,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Run probe ``patterns`` with rank r on node ``rank_nodes[r]``; rank 0's JSON result
    (``{"bytes": B, pattern: {"median_s": t, "times_s": [...]}, ...}``).

    Raises RuntimeError with the failing rank's stderr if any rank fails or times out.
    """
    port = random.randrange(20000, 40000)
    procs = []
    for rank, node in enumerate(rank_nodes):
        argv = [sys.executable, "-m", "runtime.testbed.probe", *patterns, "--rank", str(rank),
                "--world", str(len(rank_nodes)), "--master", launcher.master_addr, "--port", str(port),
                "--bytes", str(nbytes), "--iters", str(iters), "--warmup", str(warmup)]  # fmt: skip
        procs.append(launcher.spawn(node, argv, {}, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = []
    try:
        for rank, proc in enumerate(procs):
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"probe rank {rank} failed ({proc.returncode}): {err.decode()[-2000:]}")
            outs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return dict(json.loads(outs[0].decode().strip().splitlines()[-1]))
