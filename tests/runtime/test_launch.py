"""runtime.launch.Gang: the one way every plan kind starts, watches and ends the ranks of a run."""

from __future__ import annotations

import sys
import time

import pytest

from runtime.executor import LocalLauncher
from runtime.launch import Gang


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_ranks_get_torchruns_variables_and_exit_zero(tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = (
        "import os, sys; keys = ['MASTER_ADDR', 'MASTER_PORT', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK', "
        "'LOCAL_WORLD_SIZE', 'EXTRA']; open(sys.argv[1], 'w').write(' '.join(os.environ[k] for k in keys))"
    )
    nodes = [0, 1, 1]
    with Gang(
        LocalLauncher(), nodes, lambda r: [*_py(code), str(tmp_path / f"r{r}")], env={"EXTRA": "x"}
    ) as g:
        ended = g.wait(time.monotonic() + 60)
    assert ended.ok and ended.reason == "" and [e.returncode for e in ended.exits] == [0, 0, 0]
    got = [(tmp_path / f"r{r}").read_text().split() for r in range(3)]
    port = got[0][1]
    assert got == [
        ["127.0.0.1", port, "0", "3", "0", "1", "x"],
        ["127.0.0.1", port, "1", "3", "0", "2", "x"],
        ["127.0.0.1", port, "2", "3", "1", "2", "x"],
    ]


def test_first_failure_kills_the_gang_and_names_the_rank_and_its_stderr() -> None:
    def argv(rank: int) -> list[str]:
        if rank == 2:
            return _py(
                "import sys, time; time.sleep(0.3); print('noise\\nboom: rank two', file=sys.stderr); sys.exit(3)"
            )
        return _py("import time; time.sleep(120)")

    t0 = time.monotonic()
    with Gang(LocalLauncher(), [0, 0, 0], argv, dist=False) as g:
        ended = g.wait(t0 + 60)
        procs = list(g.procs)
    assert time.monotonic() - t0 < 20  # not the sleepers' 120 s nor the deadline
    assert ended.status == "failed" and ended.failed is not None and ended.failed.rank == 2
    assert ended.reason == "rank 2 exited with code 3: boom: rank two"
    assert [e.killed for e in ended.exits] == [True, True, False]
    assert all(p.poll() is not None for p in procs)


def test_deadline_kills_every_rank() -> None:
    with Gang(LocalLauncher(), [0, 0], lambda r: _py("import time; time.sleep(120)"), dist=False) as g:
        ended = g.wait(time.monotonic() + 0.5, timeout_reason="timeout: too slow")
    assert ended.status == "timeout" and ended.reason == "timeout: too slow" and ended.failed is None
    assert all(e.killed for e in ended.exits)


def test_a_gang_needs_ranks() -> None:
    with pytest.raises(ValueError, match="nodes"):
        Gang(LocalLauncher(), [], lambda r: [])
