"""Background-load measurement of a trial (runtime/executor/hostload.py)."""

from __future__ import annotations

import subprocess
import sys
import time

from runtime.executor import hostload

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"


def test_own_processes_are_not_counted_as_background_load() -> None:
    child = subprocess.Popen([sys.executable, "-c", SPIN + "time.sleep(5)"])
    try:
        before = hostload.snapshot([child.pid])
        assert before is not None
        time.sleep(0.2)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the child has spun its 0.6 s of CPU
            after = hostload.snapshot([child.pid])
            assert after is not None
            if after.own_s - before.own_s >= 0.5:
                break
            time.sleep(0.1)
        assert after.own_s - before.own_s >= 0.5  # the child's CPU time is read from /proc
        assert after.host_busy_s - before.host_busy_s >= after.own_s - before.own_s - 0.05
        share = hostload.foreign_cpu_share(before, after)
        assert share is not None and 0.0 <= share <= 1.0
    finally:
        child.kill()
        child.wait()


def test_no_share_without_snapshots() -> None:
    assert hostload.foreign_cpu_share(None, None) is None
    a = hostload.CpuSnapshot(wall=1.0, host_busy_s=10.0, own_s=1.0)
    b = hostload.CpuSnapshot(wall=2.0, host_busy_s=11.0, own_s=1.5)
    import os

    assert hostload.foreign_cpu_share(a, b) == (1.0 - 0.5) / (1.0 * (os.cpu_count() or 1))
