"""The job queue's producer side and the worker's nudge consumer: Celery on SQLite (embedded) or Redis.

A queue message is only a *nudge* ("a trial on this cluster may be waiting"); the database, reached
through the API, is the source of truth. Delivery is at least once, so every consumer claims through
the API and a redelivered or duplicated nudge claims nothing.
"""

from service.queue.app import QueueNames, make_celery
from service.queue.nudge import Nudger, consume_nudges

__all__ = ["Nudger", "QueueNames", "consume_nudges", "make_celery"]
