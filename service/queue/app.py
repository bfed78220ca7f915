"""The Celery application: broker and result backend from Settings, one queue of nudges per cluster.

Embedded default: kombu's SQLAlchemy transport on a SQLite file (``sqla+sqlite:///PATH``), so no
server is needed; production: Redis (``redis://host:6379/0``). Queues are named
``<prefix>.trials.<cluster>``: a worker subscribes to the queues of the clusters it advertises, so a
nudge wakes only a worker that can run the trial.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from celery import Celery

#: Name of the nudge task ("a trial on this cluster may be waiting").
RUN_TRIAL = "strategist.run_trial"


@dataclass(frozen=True)
class QueueNames:
    """Names of the queues and exchanges; a distinct prefix isolates two deployments on one broker."""

    # Prefix of every queue and exchange name (tests use a unique one per test).
    prefix: str = "strategist"

    def trials(self, cluster: str) -> str:
        """The queue of nudges for trials on ``cluster`` (name made safe for every transport)."""
        return f"{self.prefix}.trials.{re.sub(r'[^A-Za-z0-9_.-]', '_', cluster)}"

    @property
    def default(self) -> str:
        return f"{self.prefix}.default"


def make_celery(broker_url: str, names: QueueNames = QueueNames()) -> Celery:
    """A Celery app on ``broker_url``.

    Nudges are fire-and-forget: no result backend is configured (the outcome of a trial is in the
    database, reported through the API), so publishing needs the broker and nothing else.
    """
    app = Celery("strategist", broker=broker_url, backend=None)
    app.conf.update(
        task_default_queue=names.default,
        task_default_exchange=names.default,
        task_default_routing_key=names.default,
        task_ignore_result=True,
        # Ack on receipt: a nudge lost with a dead worker is harmless, because the stale sweep
        # requeues the trial in the database and publishes a fresh nudge.
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
    )
    if not broker_url.startswith("sqla+"):
        # kombu's SQL transport hands its transport options to create_engine, so it keeps its own
        # 1 s polling; other virtual transports poll faster for a lower nudge latency.
        app.conf.broker_transport_options = {"polling_interval": 0.3}
    return app
