"""Issue 44, item 4: a round job killed while its result was in flight read as "its result exceeded
64 MB" (every ``OSError`` from ``recv_bytes`` was taken for the size check), and was not retried.

A kill -9 lands mid-send only sometimes (2 of 3 kills in the issue's probe), so this test gives
``RoundJobs._check`` exactly what such a kill leaves: a readable pipe whose ``recv_bytes`` raises
``OSError`` ("bad message length": a torn header) and a process killed by SIGKILL. The reason must
name the signal and the job count as died (retried); a job that ended well with an oversized
result still says "exceeded" (``test_loop_jobs``' real-process test).
"""

from __future__ import annotations

import dataclasses
import signal
from typing import Any

from service.loop import jobs as loop_jobs
from service.loop.jobs import JobBudget, RoundJobs


class TornPipe:
    """The reading end after the writer died mid-message."""

    def poll(self, *_: Any) -> bool:
        return True

    def recv_bytes(self, *_: Any) -> bytes:
        raise OSError("bad message length")

    def close(self) -> None:
        pass


class Dead:
    """A job process that ended with ``exitcode`` (multiprocessing's: -N for signal N)."""

    def __init__(self, exitcode: int) -> None:
        self.exitcode = exitcode
        self.pid = 4242

    def join(self, *_: Any) -> None:
        pass

    def is_alive(self) -> bool:
        return False


def _job(exitcode: int) -> Any:
    """A running job record as the loop holds it (only the fields this version of it has)."""
    values: dict[str, Any] = {
        "search_id": 1,
        "label": "round 2",
        "process": Dead(exitcode),
        "conn": TornPipe(),
        "started": 0.0,
        "deadline": float("inf"),
        "fn": int,
        "args": (),
    }
    names = {f.name for f in dataclasses.fields(loop_jobs._Job)}
    return loop_jobs._Job(**{k: v for k, v in values.items() if k in names})


def test_a_job_killed_mid_send_says_killed_not_too_big() -> None:
    out = RoundJobs(JobBudget())._check(_job(-signal.SIGKILL))
    assert out is not None and not out.ok
    assert "exceeded" not in out.error, out.error
    assert out.error.startswith("round 2 of search 1: its process was killed by signal 9 (SIGKILL)"), (
        out.error
    )
    assert getattr(out, "died", False), "a killed job must count as died (retried), not as failed"


def test_a_torn_result_from_a_job_that_exited_well_is_the_size() -> None:
    """The other side of the rule: the size check fires only for a job that did not die."""
    out = RoundJobs(JobBudget())._check(_job(0))
    assert out is not None and out.error == "round 2 of search 1: its result exceeded 64 MB"
