"""Bounded jobs of the search loop: a round's sampling, scoring and selection (and a search's
baselines) run in a child process with a memory cap and a wall-time budget, never on the loop's
thread.

Why a process per job: a round is CPU- and memory-heavy pure computation whose cost grows with the
spec and ``samples_per_round``. Inline on the loop's thread, one heavy round stalled every other
search and grew the API process without bound; a thread cannot be stopped. A process can: it is
killed when its search is cancelled (the loop retains only jobs of active searches at each tick),
when it outlives its time budget, and it cannot grow past its address-space cap (``RLIMIT_AS``,
set in the child: allocations beyond it raise ``MemoryError`` there, not in the API). The API
process only receives the job's small result (at most ``MAX_RESULT_BYTES``), so its memory stays
flat whatever a round does.

Decisions:
- processes come from multiprocessing's *forkserver*: the server is started once (a clean, single-
  threaded process with the round's modules preloaded) and forks each job from itself, so a job
  starts in milliseconds, and never forks the API's own threads and locks (plain fork would);
- a job does not import the service's ``__main__`` (``service.loop.forkserver``): multiprocessing
  would, at each job's start, read the console script's module and the whole API from disk again,
  which fails every job (exit code 1) once the installed code changed under a running service;
- the memory cap is headroom above the job's address space at its start (the preloaded modules
  are already mapped and are not the round's doing), in MiB;
- at most ``slots`` jobs run at once; a search whose job cannot start yet waits for the next tick
  (every job ends within its budget, so a slot is never held for longer);
- a job that *dies* (killed by a signal, e.g. SIGKILL from the kernel's out-of-memory killer or an
  operator, or exiting without a result) is started again, up to ``JobBudget.retries`` times; a
  job that fails on its own (its exception, its memory cap, its time budget, an oversized result)
  is not, since it would fail the same way; every failure reason says which of these happened;
- a job's stderr goes to an unlinked temporary file, so a job that exits with a code of its own
  (a native library's ``exit(1)``, an exception that escaped) has its last line quoted in the reason;
- a job dies with the service: the forkserver exits when the API process does (its pipe closes),
  and each job asks the kernel for SIGKILL when the forkserver goes (PR_SET_PDEATHSIG), so a
  killed ``strategist serve`` leaves no job computing.

Contract: ``RoundJobs`` is owned by one thread (the loop's ticker); jobs are keyed by search id,
at most one per search, each labelled with what it computes (``"round 3"``); an outcome is handed
out once, and only to a caller asking for the same label.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import pickle
import resource
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

log = logging.getLogger("strategist.loop")

#: Modules the forkserver imports once, so that each forked job starts with them loaded.
#: (search.heterogeneous brings torch, for its RL scheduler: ~3 s that each heterogeneous job paid.)
PRELOAD = (
    "service.loop.forkserver",  # first: jobs do not import the service's __main__ (see that module)
    "service.loop.jobs",  # the job's entry point, as the service loaded it (not as the disk has it now)
    "service.loop.rounds",
    "service.loop.simulators",
    "simulator.analytical",
    "search",
    "search.heterogeneous",
    "search.samplers.warm",  # compiles the sampler's numba kernels once, for every forked job
)
#: The largest result a job may send back (pickled bytes); a round's K candidates are far smaller.
MAX_RESULT_BYTES = 64 << 20
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


@dataclass(frozen=True)
class JobBudget:
    """What one job may use."""

    # Wall-clock seconds a job may run before it is killed and its search fails.
    time_s: float = 300.0
    # Address space (MiB) a job may add above what it starts with; beyond it, MemoryError.
    memory_mb: int = 4096
    # Jobs running at once (each is one busy core while it computes).
    slots: int = 2
    # Times a job that died (killed by a signal, or gone without a result) is started again.
    retries: int = 2


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended: ``value`` when ``ok``, else ``error`` (a sentence naming the job and why)."""

    ok: bool
    value: Any = None
    error: str = ""
    # The process died rather than failed: another attempt may succeed.
    died: bool = False


@dataclass
class _Job:
    search_id: int
    label: str
    process: BaseProcess
    conn: Connection
    started: float
    deadline: float
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    attempt: int = 1
    # The job's stderr (an unlinked temporary file: nothing is left behind), read when it dies.
    stderr: Any = None


def _context() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


class RoundJobs:
    """The loop's running jobs; see the module docstring for the contract."""

    def __init__(self, budget: JobBudget = JobBudget()) -> None:
        self.budget = budget
        self._running: dict[int, _Job] = {}
        self._done: dict[int, tuple[str, JobOutcome]] = {}

    # ---------------------------------------------------------------- asking

    def running(self, search_id: int, label: str | None = None) -> bool:
        """True while a job of ``search_id`` (with ``label``, if given) is computing."""
        job = self._running.get(search_id)
        return job is not None and (label is None or job.label == label)

    def pids(self) -> dict[int, int]:
        """Search id -> pid of its running job (for tests and logs)."""
        return {sid: job.process.pid or -1 for sid, job in self._running.items()}

    # ---------------------------------------------------------------- acting

    def submit(self, search_id: int, label: str, fn: Callable[..., Any], args: Iterable[Any]) -> bool:
        """Start ``fn(*args)`` in a bounded process; False when every slot is taken.

        A job of the same search with another label is cancelled first (the search moved on).
        """
        if self.running(search_id, label):
            return True
        self.cancel(search_id)
        self._done.pop(search_id, None)
        if len(self._running) >= self.budget.slots:
            return False
        self._start(search_id, label, fn, tuple(args), attempt=1)
        return True

    def _start(
        self, search_id: int, label: str, fn: Callable[..., Any], args: tuple[Any, ...], *, attempt: int
    ) -> None:
        ctx = _context()
        job_bytes = pickle.dumps((fn, args))  # rebuilt in the child, where a failure is reported
        recv, send = ctx.Pipe(duplex=False)
        stderr = tempfile.TemporaryFile(prefix="strategist-job-")  # noqa: SIM115 (closed in _end)
        # travels to the child like a pipe end does (multiprocessing duplicates the descriptor)
        err = Connection(os.dup(stderr.fileno()), readable=False)
        process = ctx.Process(
            target=_child_main,
            args=(send, err, os.getpid(), self.budget.memory_mb, job_bytes, job_title(search_id, label)),
            name=f"strategist-search-{search_id}-{label.replace(' ', '-')}",
            daemon=True,
        )
        try:
            process.start()
        except BaseException:
            recv.close()
            stderr.close()
            raise
        finally:
            send.close()  # the child holds the only writing end: EOF when it dies
            err.close()
        now = time.monotonic()
        job = _Job(search_id, label, process, recv, now, now + self.budget.time_s, fn, args, attempt, stderr)
        self._running[search_id] = job
        log.info("search %s: %s started in process %s (attempt %s)", search_id, label, process.pid, attempt)

    def take(self, search_id: int, label: str) -> JobOutcome | None:
        """The outcome of the search's finished ``label`` job (once), after reaping; else None."""
        self.poll()
        done = self._done.get(search_id)
        if done is None or done[0] != label:
            return None
        del self._done[search_id]
        return done[1]

    def wait(self, search_id: int, timeout_s: float) -> None:
        """Block until the search's job has ended (or ``timeout_s``); for tests and one-off steps."""
        deadline = time.monotonic() + timeout_s
        while self.running(search_id) and time.monotonic() < deadline:
            job = self._running[search_id]
            job.conn.poll(min(0.1, max(0.0, deadline - time.monotonic())))
            self.poll()

    def poll(self) -> None:
        """Reap finished jobs and kill those past their deadline (cheap; called every tick)."""
        for search_id, job in list(self._running.items()):
            outcome = self._check(job)
            if outcome is None:
                continue
            del self._running[search_id]
            self._end(job)
            if outcome.died and job.attempt <= self.budget.retries:
                log.warning("search %s: %s; starting it again", search_id, outcome.error)
                self._start(search_id, job.label, job.fn, job.args, attempt=job.attempt + 1)
                continue
            if outcome.died and job.attempt > 1:
                outcome = JobOutcome(
                    False, error=f"{outcome.error} (attempt {job.attempt}, the last)", died=True
                )
            self._done[search_id] = (job.label, outcome)

    def retain(self, active: Iterable[int]) -> list[int]:
        """Cancel the jobs of searches not in ``active`` (cancelled, failed, finished); their ids."""
        keep = set(active)
        gone = [sid for sid in self._running if sid not in keep]
        for sid in gone:
            self.cancel(sid)
        for sid in [sid for sid in self._done if sid not in keep]:
            del self._done[sid]
        return gone

    def cancel(self, search_id: int) -> None:
        """Kill the search's job at once (if any); its outcome is dropped."""
        job = self._running.pop(search_id, None)
        if job is not None:
            log.info("search %s: %s stopped (process %s killed)", search_id, job.label, job.process.pid)
            self._end(job)
        self._done.pop(search_id, None)

    def close(self) -> None:
        """Kill every job (the service is stopping)."""
        for sid in list(self._running):
            self.cancel(sid)

    # ---------------------------------------------------------------- inside

    def _check(self, job: _Job) -> JobOutcome | None:
        what = f"{job.label} of search {job.search_id}"
        if job.conn.poll():
            try:
                kind, value = pickle.loads(job.conn.recv_bytes(MAX_RESULT_BYTES))
            except (EOFError, OSError, pickle.UnpicklingError) as e:
                # "bad message length" is a result past MAX_RESULT_BYTES, but only from a job that
                # ended well: a job killed mid-send leaves a torn message that reads the same way
                job.process.join(2.0)
                if isinstance(e, OSError) and job.process.exitcode in (0, None):
                    return JobOutcome(False, error=f"{what}: its result exceeded {MAX_RESULT_BYTES >> 20} MB")
                return self._died(job, what)
            if kind == "ok":
                return JobOutcome(True, value=value)
            if kind == "memory":
                return JobOutcome(False, error=self._memory_reason(what))
            return JobOutcome(False, error=f"loop error: {value}")
        if time.monotonic() > job.deadline:
            return JobOutcome(
                False,
                error=f"{what} exceeded its time budget of {self.budget.time_s:g} s "
                "(settings: round_time_budget_s; or sample fewer strategies per round)",
            )
        if not job.process.is_alive():
            return self._died(job, what)
        return None

    def _died(self, job: _Job, what: str) -> JobOutcome:
        job.process.join(1.0)
        # an exit code of its own (not a signal, which says enough): quote why, if it wrote it
        said = last_words(job.stderr) if (job.process.exitcode or 0) > 0 else ""
        words = f"; its last words on stderr: {said!r}" if said else ""
        return JobOutcome(False, error=f"{what}: its process {death(job.process.exitcode)}{words}", died=True)

    def _memory_reason(self, what: str) -> str:
        return (
            f"{what} exceeded its memory budget of {self.budget.memory_mb} MB "
            "(settings: round_memory_mb; or sample fewer strategies per round)"
        )

    @staticmethod
    def _end(job: _Job) -> None:
        if job.process.is_alive():
            job.process.kill()
        job.process.join(5.0)
        with contextlib.suppress(OSError):
            job.conn.close()
        with contextlib.suppress(ValueError):  # still running after SIGKILL: leave it to the kernel
            job.process.close()
        if job.stderr is not None:
            job.stderr.close()


def death(exitcode: int | None) -> str:
    """How a job process ended without a result, in words (``exitcode`` as multiprocessing gives it)."""
    if exitcode is None:
        return "stopped answering and was killed"
    if exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "an unknown signal"
        how = f"was killed by signal {number} ({name})"
        if number == signal.SIGKILL:
            how += "; the kernel's out-of-memory killer sends it when the machine runs out of memory"
        return how
    return f"exited with code {exitcode} without sending a result"


#: The most of a dead job's stderr that its failure reason quotes (its last line, clipped).
LAST_WORDS_CHARS = 400


def last_words(stderr: Any, window: int = 16 << 10) -> str:
    """The last non-empty line a job wrote to its stderr file (clipped), or "" when it wrote none.

    For a Python exception that escaped the job this is the exception's own line ("ValueError: ...");
    for a native library that exited the process (``exit(1)`` from C) it is that library's message."""
    if stderr is None:
        return ""
    try:
        size = os.fstat(stderr.fileno()).st_size
        tail = os.pread(stderr.fileno(), window, max(0, size - window))
    except (OSError, ValueError):
        return ""
    lines = [ln.strip() for ln in tail.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    if not lines:
        return ""
    last = lines[-1]
    return last if len(last) <= LAST_WORDS_CHARS else "..." + last[-LAST_WORDS_CHARS:]


# -------------------------------------------------------------------- in the child


def job_title(search_id: int, label: str) -> str:
    """The job process's name in ``ps`` / ``/proc/<pid>/comm`` (15 bytes at most): ``s3 round 2``,
    ``s3 baselines``; its cmdline stays the forkserver's, which says nothing of the job."""
    return f"s{search_id} {label}"[:15]


def _set_title(title: str) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_NAME, title.encode()[:15], 0, 0, 0)


def _child_main(
    conn: Connection, stderr: Connection, service_pid: int, memory_mb: int, job: bytes, title: str = ""
) -> None:
    """The job process: name itself (``job_title``), die with the service, cap memory, run ``fn``,
    send one result, exit.

    Its stderr goes to the file the parent reads when the job dies without a result (the reason
    then quotes its last line); ``fn`` and its arguments are unpickled here, after that, so that
    a failure to rebuild them is the job's reported failure rather than a bare exit code."""
    with contextlib.suppress(OSError):
        sys.stderr.flush()
        os.dup2(stderr.fileno(), 2)
    stderr.close()
    if title:
        _set_title(title)
    _die_with_parent(service_pid)
    payload: tuple[str, Any]
    try:
        _cap_memory(memory_mb)
        fn, args = pickle.loads(job)
        payload = ("ok", fn(*args))
    except MemoryError:
        payload = ("memory", None)
    except BaseException as e:  # the job's own failure (SystemExit too): its search fails with this
        payload = ("error", f"{type(e).__name__}: {e}")
    try:
        data = pickle.dumps(payload)
    except MemoryError:
        data = pickle.dumps(("memory", None))
    except Exception as e:  # a result that cannot travel is the job's failure, not a silent exit
        data = pickle.dumps(("error", f"its result could not be sent back: {type(e).__name__}: {e}"))
    with contextlib.suppress(OSError):
        conn.send_bytes(data)
        conn.close()


def _die_with_parent(service_pid: int) -> None:
    """SIGKILL when the forkserver (our parent) exits, which it does when the service dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        os.kill(service_pid, 0)  # the service died before the prctl: nothing to compute for
    except ProcessLookupError:
        os._exit(0)
    except PermissionError:
        pass


def _cap_memory(memory_mb: int) -> None:
    """Limit the address space to what is mapped now plus ``memory_mb`` MiB."""
    mapped = _address_space_bytes()
    limit = mapped + (memory_mb << 20)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


# -------------------------------------------------------------------- the jobs the loop runs
# Each wraps one call of the round's own code; what the round computes lives in service.loop.rounds.


def plan_round_job(
    model: Any,
    cluster: Any,
    version: Any,
    registry_dir: Any,
    kwargs: dict[str, Any],
) -> tuple[list[Any], str, int | None]:
    """``plan_round`` with the domain's scorer loaded here: (drafts, scorer name, version id).

    The scorer is ``service.loop.simulators.load_scorer``'s: the hybrid scorer for a transfer version."""
    from service.loop.rounds import plan_round
    from service.loop.simulators import load_scorer

    scorer, used = load_scorer(version, registry_dir)
    drafts = plan_round(model, cluster, scorer, **kwargs)
    return drafts, scorer.name, used.id if used is not None else None


def baselines_job(model: Any, cluster: Any, names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The named baseline strategies of a search, as JSON."""
    from service.loop.rounds import baseline_strategies

    return {n: s.model_dump(mode="json") for n, s in baseline_strategies(model, cluster, names).items()}
