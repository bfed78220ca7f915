"""The job queue on its two brokers: nudges go to the queue of their cluster only, duplicates are
delivered (at least once: consumers must claim through the API, see test_loop_e2e), and an
unreachable broker never breaks the producer."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.queue import Nudger, QueueNames, make_celery

REDIS = os.environ.get("STRATEGIST_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

CONSUMER = """
import sys
from service.queue import QueueNames, consume_nudges, make_celery
broker, prefix, out = sys.argv[1:4]
def on_nudge(trial_id):
    with open(out, "a") as f:
        f.write(f"{trial_id}\\n")
consume_nudges(make_celery(broker), ["c1"], on_nudge, names=QueueNames(prefix))
"""


def test_queue_names_are_per_cluster_and_transport_safe() -> None:
    names = QueueNames("p")
    assert names.trials("B1") == "p.trials.B1"
    assert names.trials("my cluster/2") == "p.trials.my_cluster_2"
    assert names.trials("B1") != names.trials("B2")


def test_unreachable_broker_returns_false_instead_of_raising() -> None:
    started = time.monotonic()
    assert Nudger(make_celery("redis://127.0.0.1:1/0")).nudge(7, "B1") is False
    assert time.monotonic() - started < 10


@pytest.fixture(params=["sqlite", "redis"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        yield f"sqla+sqlite:///{tmp_path / 'broker.db'}", prefix
        return
    import redis

    client = redis.Redis.from_url(REDIS)
    try:
        client.ping()
    except Exception as e:  # no server: skip, saying why
        pytest.skip(f"Redis unreachable at {REDIS}: {e}")
    yield REDIS, prefix
    for key in client.scan_iter(f"*{prefix}*"):  # only this test's queues and bindings
        client.delete(key)


def test_nudges_reach_their_cluster_queue_at_least_once(broker: tuple[str, str], tmp_path: Path) -> None:
    url, prefix = broker
    out = tmp_path / "received.txt"
    out.touch()
    nudger = Nudger(make_celery(url), QueueNames(prefix))
    # published before the consumer exists: the queue keeps them
    assert nudger.nudge(1, "c1") and nudger.nudge(1, "c1") and nudger.nudge(2, "c2")
    consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, url, prefix, str(out)])
    try:
        assert nudger.nudge(3, "c1")
        deadline = time.monotonic() + 60
        while sorted(out.read_text().split()) != ["1", "1", "3"] and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)  # a nudge for c2 would arrive by now if it were (wrongly) routed here
    finally:
        consumer.terminate()
        consumer.wait(timeout=30)
    assert sorted(out.read_text().split()) == ["1", "1", "3"]  # duplicates delivered, c2's not
