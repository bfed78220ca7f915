"""A rank ends with its agent even while it is still starting (issue 41, faults): the watchdog is up
before torch is imported, which takes a rank 10-30 s on a loaded 2-core host (the 10-kills test
once found ranks of a killed agent still importing 16 s later)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from runtime.agent.rank_main import AGENT_PID_ENV

REPO = Path(__file__).resolve().parents[3]


def test_the_rank_entry_imports_no_torch_before_its_watchdog() -> None:
    code = "import sys, runtime.agent.rank_main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert out.stdout.strip() == "[]"


def test_a_rank_whose_agent_dies_while_it_waits_ends(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    os.mkfifo(job)  # reading the job blocks: the rank waits until its watchdog ends it
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    env = {**os.environ, "PYTHONPATH": str(REPO), AGENT_PID_ENV: str(agent.pid)}
    rank = subprocess.Popen([sys.executable, "-m", "runtime.agent.rank_main", "--job", str(job), "--node-rank", "0"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        time.sleep(1.0)
        assert rank.poll() is None  # alive while its agent is
        agent.kill()
        agent.wait()
        t0 = time.monotonic()
        code = rank.wait(timeout=10)
        assert code == 1 and time.monotonic() - t0 < 5
    finally:
        for p in (agent, rank):
            if p.poll() is None:
                p.kill()
                p.wait()
