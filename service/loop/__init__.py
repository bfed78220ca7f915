"""The AutoSync search loop: sample → score → select → (approve) → trial → retrain, round after round.

The loop holds no state of its own: every step reads the search from the database, does the one
thing its state calls for, and writes the result back in one unit of work. ``advance(search_id)``
is therefore idempotent and can be triggered by anything (a periodic tick, a trial's report): after
a restart of the service a search simply continues where the database says it is.

One step of ``advance`` for a search in state:
- ``pending``: take it (pending → running, atomic), then go on as ``running``;
- any active state: if a baseline member that is due has no trial yet, choose the missing ones and
  queue them. The baseline families (Horovod's fusion grid, PS variants; lossy ones only when the
  search opted into compression: ``search.baselines``) are measured in the same search, spread over
  its rounds (``service.loop.rounds.due_baselines``) so they interleave with the candidates, and each
  family's tuned baseline is its fastest measured member; checking this every step, not only at
  the start, means a service killed between the two steps still queues them after its restart;
- ``awaiting_approval``: nothing more (the user decides candidates through the API);
- ``running``: if the current round still has unfinished trials, nothing; when they are all
  finished, mark the round completed and ask for the domain's simulator to be retrained on the new
  measurements; once that retraining is done (or failed), plan the next round with the newest
  simulator, or, when the trial budget is spent and the baselines are measured, complete the search.

A plan kind whose plans no worker runs (``PlanKind.predicted_only``: a hybrid search's 3D space)
takes another path: one round records the ranking as candidates with no trial, and the search
completes (``SearchLoop._predicted_round``).

Choosing baselines and planning a round are computations whose cost grows with the spec and
``samples_per_round``: they run as bounded jobs in child processes (``service.loop.jobs``), never
on the ticker thread. A step starts the job and returns; a later step stores its result. So one
search's slow round never holds up the others, a cancelled (or failed, or finished) search's job is
killed at the next tick, and a job past its time or memory budget fails its search with the
reason. Only active searches are ever advanced, so a failed or cancelled search is never resumed
when the service starts again.

Contract: ``advance`` for one search must not run concurrently with itself (``SearchLoop`` runs all
steps on its one ticker thread; a deployment runs one ticker, in the API process). The jobs belong
to that thread too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from service import domain as d
from service.db import repository as repo
from service.loop.jobs import JobBudget, JobOutcome, RoundJobs, baselines_job, plan_round_job
from service.loop.rounds import RoundConfig, due_baselines
from service.loop.simulators import RetrainConfig, Retrainer, usable_version
from service.loop.store import search_specs
from service.plans import PlanKind, RoundAsk, plan_kind
from service.queue.nudge import Nudger
from simulator.spec import ClusterSpec, ModelSpec
from simulator.spec.profile import Profile

log = logging.getLogger("strategist.loop")

#: The baseline families every search measures (members: search.baselines; queued by due_baselines).
BASELINES = ("horovod", "ps")


class JobFailed(RuntimeError):
    """A search's job (baselines or a round) failed or broke its budget; the message is the reason."""


@dataclass(frozen=True)
class LoopConfig:
    """Timing and search knobs of the loop."""

    # Seconds between ticks (advance every active search); API events wake the loop sooner.
    tick_s: float = 1.0
    # Seconds between sweeps for stale trials.
    sweep_s: float = 5.0
    # A running trial whose heartbeat is older than this is requeued by the sweep.
    heartbeat_timeout_s: float = 60.0
    # After this many claims that lost their heartbeat, a trial fails instead of being requeued.
    max_trial_attempts: int = 3
    # A queued trial is nudged again if it is still queued this many seconds after its last nudge.
    renudge_s: float = 10.0
    # Trials one user's searches may hold queued (settings.max_queued_trials): a round whose
    # trials would pass it waits (service.db.repo_quotas.queue_room).
    max_queued_trials: int = 200
    # How candidates are sampled, scored and selected.
    round: RoundConfig = field(default_factory=RoundConfig)
    # How the domain's simulator is retrained between rounds.
    retrain: RetrainConfig = field(default_factory=RetrainConfig)
    # Folder of saved simulator versions (None: never train a learned simulator).
    registry_dir: Path | None = None
    # Time, memory and concurrency budget of the loop's jobs (baselines, round planning).
    jobs: JobBudget = field(default_factory=JobBudget)


class SearchLoop:
    """Drives every active search; ``tick`` is one pass, ``run_forever`` ticks until stopped."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        config: LoopConfig = LoopConfig(),
        nudger: Nudger | None = None,
    ) -> None:
        self.sessions = sessions
        self.config = config
        self.nudger = nudger
        self.retrainer = Retrainer(sessions, config.registry_dir, config.retrain)
        self.jobs = RoundJobs(config.jobs)
        self._ticking = False
        self._nudged: dict[int, float] = {}  # trial id -> monotonic time of its last nudge
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._last_sweep = float("-inf")

    # ----------------------------------------------------------------- ticking

    def run_forever(self) -> None:
        """Tick every ``tick_s`` (or when woken) until ``stop``; a failing tick is logged, not fatal."""
        self._ticking = True
        try:
            while not self._stop.is_set():
                try:
                    self.tick()
                except Exception:  # the loop must outlive one bad step (the database may be restarting)
                    log.exception("loop tick failed")
                self._wake.wait(self.config.tick_s)
                self._wake.clear()
        finally:
            self.jobs.close()  # on the ticker thread, which owns the jobs
            self._ticking = False

    def stop(self) -> None:
        """Stop ticking; running jobs are killed (by the ticker thread, or here if none runs)."""
        self._stop.set()
        self._wake.set()
        self.retrainer.stop()
        if not self._ticking:
            self.jobs.close()

    def wake(self) -> None:
        """Run the next tick now (thread-safe; called by the API's hooks)."""
        self._wake.set()

    # The API's Orchestrator hooks (service.api.hooks): the change is already committed, so all a
    # hook does is wake the loop, which then reads it from the database like any other state.
    def search_created(self, search: d.Search) -> None:
        self.wake()

    def search_cancelled(self, search: d.Search) -> None:
        self.wake()

    def candidate_decided(self, candidate: d.Candidate, trial: d.Trial | None) -> None:
        self.wake()

    def trial_finished(self, trial: d.Trial) -> None:
        self.wake()

    def retrain_requested(self, request: d.RetrainRequest) -> None:
        self.wake()

    def tick(self) -> None:
        """Sweep stale trials (every ``sweep_s``), advance every active search, start retraining."""
        if time.monotonic() - self._last_sweep >= self.config.sweep_s:
            self._last_sweep = time.monotonic()
            self.sweep()
        with self.sessions() as s:
            active = repo.list_searches(s, states=["pending", "running", "awaiting_approval"])
        # Cancel is honoured while a job runs: a search no longer active loses its job now.
        for search_id in self.jobs.retain(x.id for x in active):
            log.info("search %s is no longer active: its job was stopped", search_id)
        for search in sorted(active, key=lambda x: x.id):
            try:
                self.advance(search.id)
            except SQLAlchemyError:  # the database is the source of truth: retry at the next tick
                log.exception("advancing search %s: database error; retrying", search.id)
            except d.Conflict as e:  # the search changed under the step (cancelled): read it again
                log.info("advancing search %s: %s", search.id, e)
            except JobFailed as e:  # its job failed or broke its budget: the reason says which
                log.warning("search %s failed: %s", search.id, e)
                self._fail(search.id, str(e))
            except Exception as e:  # a search that cannot be planned fails; the others go on
                log.exception("advancing search %s failed", search.id)
                self._fail(search.id, f"loop error: {type(e).__name__}: {e}")
        self.retrainer.poll()
        horizon = time.monotonic() - 10 * self.config.renudge_s
        self._nudged = {t: at for t, at in self._nudged.items() if at > horizon}  # bounded memory

    def sweep(self) -> list[d.Trial]:
        """Requeue trials whose heartbeat went stale, and nudge them at once."""
        with self.sessions() as s:
            changed = repo.requeue_stale_trials(
                s, timeout_s=self.config.heartbeat_timeout_s, max_attempts=self.config.max_trial_attempts
            )
        for t in changed:
            log.info("sweep: trial %s (attempt %s) is now %s", t.id, t.attempt, t.state)
            if t.state == "queued":
                self._nudge(t, force=True)
        return changed

    # ----------------------------------------------------------------- one step

    def advance(self, search_id: int, *, wait_s: float = 0.0) -> str:
        """Do the next step of a search; returns what was done (for logs and tests).

        A step that needs a job starts it and returns at once, unless ``wait_s`` > 0: then it waits
        up to that long for the job and stores its result in the same step (tests, one-off tools).
        Raises JobFailed when the search's job failed or broke its budget.
        """
        with self.sessions() as s:
            search = repo.get_search(s, search_id=search_id)
        if search.state in d.SEARCH_FINAL:
            self.jobs.cancel(search_id)
            return "final"
        if search.state == "pending":
            taken = self._start(search)
            if taken is None:
                return "taken by another step"
            search = taken
        with self.sessions() as s:
            rounds = repo.list_rounds(s, search_id=search_id)
            trials = repo.list_trials(s, search_id=search_id)
        kind = plan_kind(search.plan_kind)  # None: AutoSync strategies (the code below)
        if kind is not None and kind.predicted_only(search.plan_options):  # nothing to queue: issue 42
            return self._predicted_round(search, rounds, wait_s, kind)
        have = {t.baseline for t in trials if t.baseline}
        due = kind.due_baselines(search, trials) if kind else due_baselines(search, trials)
        missing = tuple(b for b in due if b not in have)
        if missing:
            waits = self._queue_waits(search, len(missing), "its baselines")
            if waits:  # checked every tick until they fit: a computed set waits with the jobs
                return waits
            return self._queue_baselines(search, missing, wait_s, kind)
        self._nudge_queued(search)
        if search.state == "awaiting_approval":
            return "awaiting approval"
        current = rounds[-1] if rounds else None
        if current is not None and current.state == "running":
            open_trials = [
                t for t in trials if t.round_index == current.index and t.state not in d.TRIAL_FINAL
            ]
            if open_trials:
                return f"round {current.index}: {len(open_trials)} trials running"
            with self.sessions() as s:
                repo.set_round_state(s, round_id=current.id, state="completed")
            if kind is None or kind.retrains:
                self.retrainer.request(search.domain)
            log.info("search %s: round %s completed", search_id, current.index)
            return f"round {current.index} completed"
        if (kind is None or kind.retrains) and self.retrainer.busy(search.domain):
            return "retraining"
        done = sum(1 for t in trials if t.candidate_id is not None)
        remaining = search.trial_budget - done
        if remaining <= 0:
            return self._finish(search, trials)
        k = min(search.candidates_per_round, remaining, self.config.max_queued_trials)
        waits = self._queue_waits(search, k, f"round {search.current_round + 1}")
        if waits:  # a plan already computed waits with the jobs until it fits
            return waits
        if kind is not None:
            return self._next_kind_round(search, trials, k, wait_s, kind)
        return self._next_round(search, trials, k, wait_s)

    def _queue_waits(self, search: d.Search, n: int, what: str) -> str:
        """Why ``what`` (``n`` trials to queue) must wait for the owner's ``max_queued_trials``; ''
        when it fits. The search waits (it does not fail): workers taking trials make room."""
        n = min(n, self.config.max_queued_trials)  # more than the limit could never fit
        with self.sessions() as s:
            room = repo.queue_room(
                s, owner_id=search.owner_id, max_queued_trials=self.config.max_queued_trials
            )
        if room >= n:
            return ""
        why = (
            f"{what} waits: its {n} trials would pass the owner's max_queued_trials of"
            f" {self.config.max_queued_trials} ({room} more may be queued)"
        )
        log.debug("search %s: %s", search.id, why)
        return why

    def _start(self, search: d.Search) -> d.Search | None:
        with self.sessions() as s:
            taken = repo.transition_search(
                s, search_id=search.id, from_states=["pending"], to_state="running"
            )
        if taken is not None:
            log.info("search %s: started", search.id)
        return taken

    def _job(
        self,
        search: d.Search,
        label: str,
        fn: Callable[..., Any],
        args: Callable[[], tuple[Any, ...]],
        wait_s: float,
    ) -> JobOutcome | str:
        """The outcome of the search's ``label`` job, starting it if needed; a str while it runs."""
        outcome = self.jobs.take(search.id, label)
        if outcome is None:
            if not self.jobs.running(search.id, label) and not self.jobs.submit(search.id, label, fn, args()):
                return f"{label}: waiting for a free job slot"
            if wait_s > 0:
                self.jobs.wait(search.id, wait_s)
                outcome = self.jobs.take(search.id, label)
            if outcome is None:
                return f"{label}: computing"
        if not outcome.ok:
            raise JobFailed(outcome.error)
        return outcome

    def _queue_baselines(
        self, search: d.Search, missing: tuple[str, ...], wait_s: float, kind: PlanKind | None = None
    ) -> str:
        if kind is None:
            out = self._job(
                search, "baselines", baselines_job, lambda: (*self._specs(search), missing), wait_s
            )
        else:
            options = search.plan_options or {}

            def args() -> tuple[Any, ...]:
                model, cluster = self._specs(search)
                return model, cluster, options, missing, self._profiles(search, model)

            out = self._job(search, "baselines", kind.baselines, args, wait_s)
        if isinstance(out, str):
            return out
        queued = [n for n in missing if n in out.value]  # the job may have started when fewer were due
        dropped = [n for n in queued if out.value[n].get("kind") == "infeasible"]
        if dropped:  # a plan kind checked its default baselines in the job: keep those that can run
            kept = [n for n in (kind.due_baselines(search, []) if kind else ()) if n not in dropped]
            with self.sessions() as s:
                repo.set_plan_options(
                    s, search_id=search.id, plan_options={**(search.plan_options or {}), "baselines": kept}
                )
            log.info("search %s: baselines %s cannot meet the limit, dropped", search.id, ", ".join(dropped))
            queued = [n for n in queued if n not in dropped]
        for name in queued:
            with self.sessions() as s:
                trial = repo.enqueue_trial(s, search_id=search.id, strategy=out.value[name], baseline=name)
            self._nudge(trial, force=True)
        log.info("search %s: baselines %s queued", search.id, ", ".join(queued))
        return "baselines queued"

    def _next_round(self, search: d.Search, trials: list[d.Trial], k: int, wait_s: float) -> str:
        def args() -> tuple[Any, ...]:
            model, cluster = self._specs(search)
            with self.sessions() as s:
                version = usable_version(s, search.domain, self.config.registry_dir)
            kwargs = {
                "samples": search.samples_per_round,
                "k": k,
                "seed": search.seed * 1_000 + search.current_round + 1,
                "exclude": [t.strategy for t in trials],
                "config": self.config.round,
                "compression": search.compression,
            }
            return model, cluster, version, self.config.registry_dir, kwargs

        out = self._job(search, f"round {search.current_round + 1}", plan_round_job, args, wait_s)
        if isinstance(out, str):
            return out
        drafts, simulator_kind, version_id = out.value
        with self.sessions() as s:
            rnd, cands = repo.add_round(
                s,
                search_id=search.id,
                candidates=drafts,
                samples=search.samples_per_round,
                simulator_kind=simulator_kind,
                simulator_version_id=version_id,
            )
        log.info(
            "search %s: round %s planned with %s (%s candidates)",
            search.id,
            rnd.index,
            simulator_kind,
            len(cands),
        )
        self._nudge_queued(search)
        return f"round {rnd.index} planned"

    def _next_kind_round(
        self, search: d.Search, trials: list[d.Trial], k: int, wait_s: float, kind: PlanKind
    ) -> str:
        """A round of a non-AutoSync kind (``service.plans``); no new plan at all completes the search."""
        index = search.current_round + 1
        options = search.plan_options or {}

        def args() -> tuple[Any, ...]:
            model, cluster = self._specs(search)
            ask = RoundAsk(
                index=index,
                k=k,
                seed=search.seed * 1_000 + index,
                tried=tuple(t.strategy for t in trials),
                profiles=self._profiles(search, model),
            )
            return model, cluster, options, ask

        out = self._job(search, f"round {index}", kind.plan_round, args, wait_s)
        if isinstance(out, str):
            return out
        if not out.value.drafts:
            log.info("search %s: %s planner has no new plan to try", search.id, kind.name)
            return self._finish(search, trials)
        with self.sessions() as s:
            rnd, cands = repo.add_round(
                s,
                search_id=search.id,
                candidates=list(out.value.drafts),
                samples=search.samples_per_round,
                simulator_kind=out.value.scorer,
            )
        log.info(
            "search %s: round %s planned by %s (%s candidates)",
            search.id,
            rnd.index,
            out.value.scorer,
            len(cands),
        )
        self._nudge_queued(search)
        return f"round {rnd.index} planned"

    def _predicted_round(self, search: d.Search, rounds: list[d.Round], wait_s: float, kind: PlanKind) -> str:
        """A predicted-only kind's search (``PlanKind.predicted_only``): one round ranks the plans,
        records the ``trial_budget`` fastest predicted as candidates with no trial (no worker runs
        them, so none waits in a queue or takes a quota), and the search completes with that
        ranking as its answer (``service.plans.results``: nothing measured, nothing recommended)."""
        if rounds:  # recorded by an earlier step that stopped before completing the search
            return self._finish(search, [])
        options = search.plan_options or {}

        def args() -> tuple[Any, ...]:
            model, cluster = self._specs(search)
            ask = RoundAsk(
                index=1, k=search.trial_budget, seed=search.seed * 1_000 + 1, tried=(), profiles=()
            )
            return model, cluster, options, ask

        out = self._job(search, "round 1", kind.plan_round, args, wait_s)
        if isinstance(out, str):
            return out
        with self.sessions() as s:
            repo.add_round(
                s,
                search_id=search.id,
                candidates=list(out.value.drafts),
                samples=search.samples_per_round,
                simulator_kind=out.value.scorer,
                queue_trials=False,
            )
        log.info("search %s: %s plans ranked, predicted only", search.id, len(out.value.drafts))
        return self._finish(search, [])

    def _finish(self, search: d.Search, trials: list[d.Trial]) -> str:
        if any(t.baseline and t.state not in d.TRIAL_FINAL for t in trials):
            return "waiting for baselines"
        with self.sessions() as s:
            repo.transition_search(
                s, search_id=search.id, from_states=["running", "awaiting_approval"], to_state="completed"
            )
        log.info("search %s: completed", search.id)
        return "completed"

    def _fail(self, search_id: int, reason: str) -> None:
        with self.sessions() as s:
            repo.transition_search(
                s,
                search_id=search_id,
                from_states=["pending", "running", "awaiting_approval"],
                to_state="failed",
                failure_reason=reason[:2000],
            )

    # ----------------------------------------------------------------- helpers

    def _specs(self, search: d.Search) -> tuple[ModelSpec, ClusterSpec]:
        with self.sessions() as s:
            return search_specs(s, search=search)

    def _profiles(self, search: d.Search, model: ModelSpec) -> tuple[Profile, ...]:
        """The measured profiles of ``model`` the search's owner uses (their own and the zoo-wide
        ones, uploaded through ``POST /profiles`` or reported by a profile job): what a plan kind's
        round ranks with and its documents carry to the worker's replay (issues 15, 44)."""
        with self.sessions() as s:
            return repo.profiles_in_use(s, owner_id=search.owner_id, model=model.name)

    def _nudge_queued(self, search: d.Search) -> None:
        with self.sessions() as s:
            queued = repo.list_trials(s, search_id=search.id, states=["queued"])
        for t in queued:
            self._nudge(t)

    def _nudge(self, trial: d.Trial, *, force: bool = False) -> None:
        """Publish a nudge for a queued trial, at most every ``renudge_s`` unless forced."""
        if self.nudger is None:
            return
        now = time.monotonic()
        last = self._nudged.get(trial.id)
        if not force and last is not None and now - last < self.config.renudge_s:
            return
        self._nudged[trial.id] = now
        self.nudger.nudge(trial.id, trial.cluster_name)


def run_in_thread(loop: SearchLoop, name: str = "search-loop") -> Callable[[], None]:
    """Start ``loop.run_forever`` on a daemon thread; returns a function that stops and joins it."""
    thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
    thread.start()

    def stop() -> None:
        loop.stop()
        thread.join(timeout=30)

    return stop
