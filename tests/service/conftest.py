"""Shared fixtures of the service tests: one database per backend (SQLite and PostgreSQL), sessions,
settings, small specs, tokens and an API test client.

Every test that uses ``database_url`` (directly or through ``session``/``client``) runs twice, once
per backend. PostgreSQL: ``STRATEGIST_TEST_POSTGRES_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``) names a server and maintenance database; a
uniquely named database is created for the test session, migrated, and dropped at the end. When
the server cannot be reached the PostgreSQL half is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from service import domain as d
from service.client import StrategistClient
from service.db import repository as repo
from service.db.engine import make_engine, session_factory, upgrade
from service.db.models import Base
from service.settings import Settings
from simulator import zoo

from .helpers import api_client

PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def small_model(name: str = "tiny-mlp") -> dict[str, Any]:
    """A two-layer model spec (JSON): fc1 (64x32 weight + bias) → fc2 (32x10 weight)."""
    return {
        "kind": "model",
        "name": name,
        "family": "IC",
        "batch_size": 8,
        "layers": [
            {
                "name": "fc1",
                "kind": "linear",
                "fwd_flops": 4096.0,
                "activation_bytes": 128.0,
                "variables": [
                    {"name": "fc1.weight", "shape": [64, 32]},
                    {"name": "fc1.bias", "shape": [32]},
                ],
            },
            {
                "name": "fc2",
                "kind": "linear",
                "fwd_flops": 640.0,
                "activation_bytes": 40.0,
                "variables": [{"name": "fc2.weight", "shape": [32, 10]}],
                "inputs": ["fc1"],
            },
        ],
    }


def small_cluster(name: str = "two-node") -> dict[str, Any]:
    """Two nodes with one GPU each on a 10 Gbit/s network (JSON)."""
    gpu = {"name": "T4", "fp32_tflops": 8.1, "fp16_tflops": 65, "memory_gb": 16, "memory_bw_gbs": 320}
    return {
        "kind": "cluster",
        "name": name,
        "device_types": [gpu],
        "nodes": [
            {"name": "n0", "device": "T4", "gpus": 1, "nic_gbps": 10, "price_per_hour": 1.0},
            {"name": "n1", "device": "T4", "gpus": 1, "nic_gbps": 10, "price_per_hour": 1.0},
        ],
        "intra_node_gbps": 100,
    }


def small_strategy(label: str = "", *, ps: bool = False, group: int = 0) -> dict[str, Any]:
    """A valid strategy of ``small_model`` on ``small_cluster``: all-reduce, or PS on node n0."""
    sync: dict[str, Any] = {"kind": "ps", "server": "n0"} if ps else {"kind": "collective", "group": group}
    names = ("fc1.weight", "fc1.bias", "fc2.weight")
    return {
        "kind": "strategy",
        "name": label,
        "variables": [{"variable": n, "shards": [sync]} for n in names],
    }


class SpecFactory:
    """The small specs above, as a fixture (test modules cannot import conftest by name)."""

    model = staticmethod(small_model)
    cluster = staticmethod(small_cluster)
    strategy = staticmethod(small_strategy)


@pytest.fixture
def specs() -> SpecFactory:
    return SpecFactory()


def _pg_url() -> str:
    return os.environ.get("STRATEGIST_TEST_POSTGRES_URL", PG_DEFAULT)


@pytest.fixture(scope="session")
def _postgres_database() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test session (dropped afterwards)."""
    admin_url = make_url(_pg_url())
    try:
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as e:  # any connection failure: skip the PostgreSQL half, with the reason
        pytest.skip(f"PostgreSQL at {admin_url.render_as_string(hide_password=True)} unreachable: {e}")
    name = f"strategist_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    # Durability is not under test: not waiting for the WAL flush on each commit halves the run time.
    test_url = admin_url.set(database=name).update_query_dict({"options": "-c synchronous_commit=off"})
    url = test_url.render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def _sqlite_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'strategist.db'}"
    upgrade(url)
    return url


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """URL of a migrated database; the test runs once on SQLite and once on PostgreSQL."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("_postgres_database"))
    return str(request.getfixturevalue("_sqlite_database"))


def clear_tables(engine: Engine) -> None:
    """Empty every table (keeping the schema and Alembic's version), ids restarting at 1.

    DELETE rather than TRUNCATE on PostgreSQL: on tables this small it is ~10x faster.
    """
    tables = [t.name for t in Base.metadata.sorted_tables]
    with engine.begin() as conn:
        for name in reversed(tables):
            conn.execute(text(f"DELETE FROM {name}"))
        if engine.dialect.name == "postgresql":
            for name in tables:
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), 1, false)"))


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on an empty database (tables cleared before the test)."""
    eng = make_engine(database_url)
    clear_tables(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    """The session factory; use one session per thread."""
    return session_factory(engine)


@pytest.fixture
def session(sessions: sessionmaker[Session]) -> Iterator[Session]:
    with sessions() as s:
        yield s


@pytest.fixture
def zoo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private zoo holding ``tiny-mlp`` and ``two-node`` (STRATEGIST_DATASETS points at it)."""
    root = tmp_path / "zoo"
    (root / "models").mkdir(parents=True)
    (root / "clusters").mkdir()
    (root / "models" / "tiny-mlp.json").write_text(json.dumps(small_model()))
    (root / "clusters" / "two-node.json").write_text(json.dumps(small_cluster()))
    monkeypatch.setenv("STRATEGIST_DATASETS", str(root))
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()
    yield root
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    """Settings on the test database, with data under tmp_path and no broker configured for use."""
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        broker_url="memory://",
        heartbeat_timeout_s=30.0,
        migrate_on_start=False,  # the session's database is migrated once, up front
    )


class RecordingOrchestrator:
    """An Orchestrator that records every hook call as (hook name, id of the object)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def search_created(self, search: Any) -> None:
        self.calls.append(("search_created", search.id))

    def search_cancelled(self, search: Any) -> None:
        self.calls.append(("search_cancelled", search.id))

    def candidate_decided(self, candidate: Any, trial: Any) -> None:
        self.calls.append(("candidate_decided", candidate.id))

    def trial_finished(self, trial: Any) -> None:
        self.calls.append(("trial_finished", trial.id))

    def retrain_requested(self, request: Any) -> None:
        self.calls.append(("retrain_requested", request.id))


@pytest.fixture
def hooks() -> RecordingOrchestrator:
    return RecordingOrchestrator()


@pytest.fixture
def client(
    settings: Settings, engine: Engine, zoo_dir: Path, hooks: RecordingOrchestrator
) -> Iterator[TestClient]:
    """A TestClient on ``create_app(settings, orchestrator=hooks)`` over the cleared test database."""
    from service.api.app import create_app

    with TestClient(create_app(settings, orchestrator=hooks)) as c:
        yield c


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def search_of(session: Session, zoo_dir: Path) -> Any:
    """``search_of(owner_name, **options) -> Search``: a pending search of tiny-mlp on two-node."""

    def make(owner: str = "alice", **options: Any) -> Any:
        principal = repo.create_token(session, name=owner, role="user").info
        model = repo.zoo_spec(session, kind="model", name="tiny-mlp")
        cluster = repo.zoo_spec(session, kind="cluster", name="two-node")
        return repo.create_search(
            session, owner_id=principal.user_id, model=model, cluster=cluster, **options
        )

    return make


@pytest.fixture
def tokens(session: Session) -> dict[str, dict[str, str]]:
    """Auth headers for two users (alice, bob), a worker and an admin."""
    made = {
        "alice": repo.create_token(session, name="alice", role="user"),
        "bob": repo.create_token(session, name="bob", role="user"),
        "worker": repo.create_token(session, name="worker-1", role="worker"),
        "admin": repo.create_token(session, name="root", role="admin"),
    }
    return {k: bearer(v.secret) for k, v in made.items()}


@pytest.fixture
def user(session: Session) -> d.IssuedToken:
    """A user (erin) and the token issued to them."""
    return repo.create_token(session, name="erin", role="user")


@pytest.fixture
def api(client: TestClient, user: d.IssuedToken) -> Iterator[StrategistClient]:
    """``user``'s StrategistClient over the app in process."""
    with api_client(client, user.secret) as c:
        yield c


def processes_marked(mark: str) -> dict[int, str]:
    """Live processes whose environment carries ``STRATEGIST_TEST_MARK=mark``: pid -> command line.

    Every process a test starts inherits the mark (serve, its worker, trial processes, the
    executor's ranks, the loop's jobs), so a test can list exactly its own, zombies excluded.
    """
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
        if f"STRATEGIST_TEST_MARK={mark}".encode() in env.split(b"\0") and not zombie:
            found[int(entry.name)] = cmdline.strip()
    return found


@pytest.fixture
def marked() -> Callable[[str], dict[int, str]]:
    """``marked(mark)``: the live processes carrying ``STRATEGIST_TEST_MARK=mark`` (pid -> cmdline)."""
    return processes_marked


def _wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``check`` every 0.3 s until it returns something truthy (returned); fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.3)


@pytest.fixture
def wait_for() -> Callable[[Callable[[], Any], float, str], Any]:
    """``wait_for(check, timeout_s, what)``: poll until ``check()`` is truthy (the end-to-end tests)."""
    return _wait_for


@pytest.fixture
def mark() -> Iterator[str]:
    """A fresh ``STRATEGIST_TEST_MARK`` for a test's subprocesses; whatever still carries it at the
    end is killed."""
    m = uuid.uuid4().hex
    yield m
    for pid in processes_marked(m):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def queued(client: TestClient, tokens: dict[str, Any], session: Session, specs: Any) -> int:
    """A search of alice's (tiny-mlp on two-node) with one queued baseline trial; its id."""
    sid = int(
        client.post(
            "/api/v1/searches", json={"model": "tiny-mlp", "cluster": "two-node"}, headers=tokens["alice"]
        ).json()["id"]
    )
    repo.enqueue_trial(session, search_id=sid, strategy=specs.strategy("horovod"), baseline="horovod")
    return sid


# --- pipeline and hybrid searches (issues 17, 19): small specs in the private zoo ---


def chain_model(name: str, layers: list[str], hidden: int = 256, batch: int = 8) -> dict[str, Any]:
    """Linear layers of hidden x hidden weights, each reading the previous one."""
    return {
        "kind": "model",
        "name": name,
        "family": "LM",
        "batch_size": batch,
        "layers": [
            {
                "name": n,
                "kind": "linear",
                "fwd_flops": 2.0 * hidden * hidden * 64,
                "activation_bytes": 4.0 * 64 * hidden,
                "variables": [{"name": f"{n}.weight", "shape": [hidden, hidden]}],
                **({"inputs": [layers[i - 1]]} if i else {}),
            }
            for i, n in enumerate(layers)
        ],
    }


V100 = {"name": "V100", "fp32_tflops": 15.7, "fp16_tflops": 125, "memory_gb": 32, "memory_bw_gbs": 900}
P100 = {"name": "P100", "fp32_tflops": 9.3, "fp16_tflops": 18.7, "memory_gb": 16, "memory_bw_gbs": 732}


def two_nodes(name: str, devices: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    types = list({d["name"]: d for d in devices}.values())
    return {
        "kind": "cluster",
        "name": name,
        "device_types": types,
        "nodes": [
            {"name": f"n{i}", "device": d["name"], "gpus": 1, "nic_gbps": 10, "price_per_hour": 1.0}
            for i, d in enumerate(devices)
        ],
        "intra_node_gbps": 100,
    }


@pytest.fixture
def plan_zoo(zoo_dir: Path) -> Path:
    """tiny-mlp/two-node plus pp-chain on pp-2 (two V100) and mixed-net on mixed-2 (V100 + P100)."""
    (zoo_dir / "models" / "pp-chain.json").write_text(
        json.dumps(chain_model("pp-chain", [f"b{i}" for i in range(4)]))
    )
    (zoo_dir / "models" / "mixed-net.json").write_text(
        json.dumps(chain_model("mixed-net", ["features.0", "features.1", "classifier"]))
    )
    (zoo_dir / "clusters" / "pp-2.json").write_text(json.dumps(two_nodes("pp-2", (V100, V100))))
    (zoo_dir / "clusters" / "mixed-2.json").write_text(json.dumps(two_nodes("mixed-2", (V100, P100))))
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()
    return zoo_dir


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The bodies ``strategist search create`` sends (the client's create_search replaced: id 7)."""
    from types import SimpleNamespace

    from service.api.schemas.searches import SearchCreate
    from service.client import StrategistClient

    bodies: list[dict[str, Any]] = []

    def create(self: StrategistClient, body: SearchCreate) -> Any:
        bodies.append(body.model_dump())
        return SimpleNamespace(id=7)

    monkeypatch.setattr(StrategistClient, "create_search", create)
    return bodies


@pytest.fixture
def heterps_zoo(zoo_dir: Path) -> Path:
    """The private zoo plus the real CTRDNN and HeterPS-2GPU specs (cost-objective searches)."""
    import shutil

    datasets = Path(__file__).resolve().parents[2] / "datasets"
    shutil.copy(datasets / "models" / "CTRDNN.json", zoo_dir / "models")
    shutil.copy(datasets / "clusters" / "HeterPS-2GPU.json", zoo_dir / "clusters")
    zoo.model.cache_clear()
    zoo.cluster.cache_clear()
    return zoo_dir


#: Debian's chromium, which the browser tests drive with Playwright (scripts/install.sh installs it).
CHROMIUM = os.environ.get("STRATEGIST_CHROMIUM", "/usr/bin/chromium")
#: Where the browser tests leave their screenshots.
ARTIFACTS = Path(
    os.environ.get("STRATEGIST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)


def require_chromium() -> None:
    """Skip the calling test module when chromium is missing; under CI that is an error instead.

    Called at a browser test module's top, so that its module-scoped fixtures never start.
    """
    if not Path(CHROMIUM).is_file():
        if os.environ.get("CI"):
            raise RuntimeError(f"{CHROMIUM} is missing: scripts/install.sh installs Debian's chromium")
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)


@pytest.fixture
def browser_page() -> Iterator[tuple[Any, list[str]]]:
    """A page of a fresh headless chromium (1280x900) and the list every console error and
    uncaught page error is appended to (``console: ...``, ``pageerror: ...``); closed afterwards."""
    require_chromium()
    from playwright.sync_api import ConsoleMessage, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )  # fmt: skip
        page = browser.new_page(viewport={"width": 1280, "height": 900})

        def on_console(msg: ConsoleMessage) -> None:
            if msg.type == "error":
                errors.append(f"console: {msg.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        try:
            yield page, errors
        finally:
            browser.close()
