"""docker-compose.yml's processes, run directly: the migration step, the API on PostgreSQL with the
Redis broker, and a worker consuming nudges from Redis; /readyz and a trial round-trip.

The commands and environment are read from docker-compose.yml; only what Docker would resolve is
substituted: service host names become 127.0.0.1, the database is a fresh PostgreSQL database, the
broker is Redis database 15 (only this test's keys are deleted), the API port is a free one, and
the worker's ``--pool gpu`` becomes ``--pool testbed`` (no GPU here) on the test's small cluster.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from search.baselines import baseline_names

ROOT = Path(__file__).resolve().parents[2]
PG = os.environ.get("STRATEGIST_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("STRATEGIST_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def pg_database() -> Iterator[str]:
    admin_url = make_url(PG)
    try:
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as e:  # no server: skip, saying why
        pytest.skip(f"PostgreSQL unreachable: {e}")
    name = f"strategist_compose_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def redis_url() -> Iterator[str]:
    import redis

    client = redis.Redis.from_url(REDIS)
    try:
        client.ping()
    except Exception as e:  # no server: skip, saying why
        pytest.skip(f"Redis unreachable at {REDIS}: {e}")
    yield REDIS
    # only our keys: the queues and bindings named with the compose deployment's prefix
    for key in client.scan_iter("*strategist*"):
        client.delete(key)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def localize(value: str, *, database: str, broker: str, api: str) -> str:
    """What Docker's network would resolve, resolved for this machine."""
    value = value.replace("redis://redis:6379/0", broker).replace("http://api:8000", api)
    if value.startswith("postgresql+psycopg://") and "@postgres:5432/" in value:
        return database
    return value


def test_compose_processes_round_trip(
    pg_database: str, redis_url: str, tmp_path: Path, zoo_dir: Path, wait_for: Callable[..., Any]
) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    secrets = {
        "STRATEGIST_ADMIN_TOKEN": "adm_" + uuid.uuid4().hex,
        "STRATEGIST_WORKER_TOKEN": "wrk_" + uuid.uuid4().hex,
    }

    def env_of(service: str) -> dict[str, str]:
        env = {**os.environ, "STRATEGIST_DATA_DIR": str(tmp_path / service)}
        for key, value in (services[service].get("environment") or {}).items():
            env[key] = secrets.get(key) or localize(
                str(value), database=pg_database, broker=redis_url, api=api
            )
        return env

    def argv_of(service: str) -> list[str]:
        cmd = [
            localize(a, database=pg_database, broker=redis_url, api=api) for a in services[service]["command"]
        ]
        return [sys.executable, "-c", "from service.cli import main; main()", *cmd[1:]]

    # 1. the migration step runs to completion
    migrate = subprocess.run(argv_of("migrate"), env=env_of("migrate"), capture_output=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr.decode()[-2000:]

    # 2. the API (with the search loop) on PostgreSQL and Redis
    api_argv = argv_of("api")
    api_argv[api_argv.index("--port") + 1] = str(port)
    api_argv[api_argv.index("--host") + 1] = "127.0.0.1"
    procs: list[subprocess.Popen[bytes]] = [subprocess.Popen(api_argv, env=env_of("api"))]
    try:

        def ready() -> Any:
            try:
                r = httpx.get(f"{api}/readyz", timeout=5)
            except httpx.HTTPError:
                return None
            return r.status_code == 200 and r.json()

        body = wait_for(ready, 480, "the API's /readyz")
        assert body["checks"]["database"] == "ok" and body["checks"]["broker"] == "ok"
        assert body["checks"]["migrations"].startswith("ok")

        # 3. the worker, consuming nudges from Redis (testbed pool instead of gpu: no GPU here)
        worker_argv = argv_of("worker")
        worker_argv[worker_argv.index("--pool") + 1] = "testbed"
        worker_argv += ["--clusters", "two-node", "--iterations", "3", "--warmup", "1", "--heartbeat", "0.5"]
        procs.append(subprocess.Popen(worker_argv, env=env_of("worker")))

        # 4. a trial round-trip: a one-trial search (plus its measured baseline members) completes
        admin = {"Authorization": f"Bearer {secrets['STRATEGIST_ADMIN_TOKEN']}"}
        r = httpx.post(
            f"{api}/api/v1/searches",
            headers=admin,
            timeout=60,
            json={
                "model": "tiny-mlp",
                "cluster": "two-node",
                "trial_budget": 1,
                "candidates_per_round": 1,
                "samples_per_round": 20,
            },
        )
        assert r.status_code == 201, r.text
        sid = r.json()["id"]

        def finished() -> Any:
            try:
                st = httpx.get(f"{api}/api/v1/searches/{sid}", headers=admin, timeout=30).json()
            except httpx.HTTPError:  # a slow answer on a loaded machine: ask again
                return None
            return st["search"]["state"] in ("completed", "failed") and st

        final = wait_for(finished, 420, "the search to finish")
        assert final["search"]["state"] == "completed", final["search"]["failure_reason"]
        trials = httpx.get(f"{api}/api/v1/searches/{sid}/trials", headers=admin, timeout=60).json()["data"]
        assert len(trials) == 1 + len(baseline_names()) and all(
            t["state"] == "succeeded" and t["attempt"] == 1 for t in trials
        )
        assert all(t["claimed_by"] for t in trials)
        assert set(final["speedups"]) == {"horovod", "ps"}
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
