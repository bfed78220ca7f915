"""Publishing nudges (the service side) and consuming them (inside a worker process).

At-least-once contract: a nudge may arrive twice, late, or never. Consumers therefore never act on
the trial id they were given; they claim through the API, which hands out each queued trial to
exactly one worker. A nudge that arrives never is covered by the worker's idle poll and by the
sweep, which re-publishes nudges for trials still queued.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence

from celery import Celery

from service.queue.app import RUN_TRIAL, QueueNames

log = logging.getLogger("strategist.queue")

#: A nudge is not worth blocking the loop for: two quick retries, then give up (the poll covers it).
PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0.0, "interval_step": 0.2, "interval_max": 0.5}


class Nudger:
    """Publishes ``run_trial`` nudges; thread-safe (Celery's producer pool is)."""

    def __init__(self, app: Celery, names: QueueNames = QueueNames()) -> None:
        self.app = app
        self.names = names

    def nudge(self, trial_id: int, cluster: str) -> bool:
        """Publish one nudge; False (logged, not raised) when the broker is unreachable.

        A failed publish loses nothing: the trial is queued in the database and the worker's idle
        poll finds it.
        """
        try:
            self.app.send_task(
                RUN_TRIAL,
                args=(trial_id, cluster),
                queue=self.names.trials(cluster),
                retry=True,
                retry_policy=PUBLISH_RETRY,
            )
        except Exception as e:  # the broker is an accelerator here, never the source of truth
            log.warning("nudge for trial %s not published: %s", trial_id, e)
            return False
        return True


def consume_nudges(
    app: Celery,
    clusters: Sequence[str],
    on_nudge: Callable[[int], None],
    *,
    names: QueueNames = QueueNames(),
    hostname: str | None = None,
    loglevel: str = "WARNING",
    on_shutdown: Callable[[], None] | None = None,
) -> None:
    """Run a Celery worker in this process, calling ``on_nudge(trial_id)`` for every nudge.

    Consumes the queues of ``clusters`` with the solo pool (one nudge at a time, in this thread);
    blocks until the process gets SIGTERM or SIGINT (then ``on_shutdown`` is called at once, and the
    nudge in progress is finished). ``on_nudge`` must claim through the API.
    """

    @app.task(name=RUN_TRIAL, ignore_result=True)
    def run_trial(trial_id: int, cluster: str) -> None:
        log.info("nudge: trial %s on %s", trial_id, cluster)
        on_nudge(int(trial_id))

    # Trials on the testbed need root (network namespaces); Celery's warning about it is noise.
    warnings.filterwarnings("ignore", message="You're running the worker with superuser privileges")
    if on_shutdown is not None:
        from celery.signals import worker_shutting_down

        worker_shutting_down.connect(lambda **_: on_shutdown(), weak=False)
    worker = app.Worker(
        pool="solo",
        concurrency=1,
        queues=[names.trials(c) for c in clusters],
        hostname=hostname,
        loglevel=loglevel,
        quiet=True,
        # The SQL transport has no fan-out; these broadcast features need it and are not used.
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )
    worker.start()
