"""Engines, sessions and migrations for SQLite (embedded, WAL, foreign keys on) and PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import CursorResult, Engine, Result, create_engine, event, exc, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

ALEMBIC_INI = Path(__file__).resolve().parent / "alembic.ini"


#: Connections a PostgreSQL pool given a ``pool_size`` may open beyond it (none: see make_engine).
POOL_OVERFLOW = 0


def make_engine(url: str, *, echo: bool = False, pool_size: int | None = None) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys, and a busy timeout for concurrent writers.

    The folder of a SQLite file is created if missing. PostgreSQL URLs should use the psycopg 3
    driver (``postgresql+psycopg://``); a bare ``postgresql://`` is rewritten to it.

    ``pool_size`` (PostgreSQL): the most connections the pool opens, all kept open once opened (a
    caller past it waits for one); None keeps SQLAlchemy's default (5 kept, 10 more opened in a burst
    and closed on return). Decision (measured, issue 21): the API's thread pool runs up to 40
    requests' database work at once, so with the default pool, under 50 clients one status read in
    seven opened a new PostgreSQL session (150 for 1102 requests, after a warm-up cell), each a
    server process forked and authenticated; with 20 kept + 10 in bursts still 46 for 1034; with
    30 kept and no burst connections, none (0 for 1042 status reads, 0 for 952 creations). The API
    passes ``settings.db_pool_size`` (30: two API processes and the loop's default pool stay under
    PostgreSQL's default max_connections of 100).
    """
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    kwargs: dict[str, Any] = {"echo": echo, "future": True}
    if pool_size is not None and parsed.get_backend_name() == "postgresql":
        kwargs.update(pool_size=pool_size, max_overflow=POOL_OVERFLOW)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    engine = create_engine(parsed, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        _ping_when_idle(engine)
    return engine


#: A pooled connection unused for longer than this is pinged before it is handed out.
PING_AFTER_IDLE_S = 10.0


def _ping_when_idle(engine: Engine) -> None:
    """Check a pooled connection before use only when it has been idle for ``PING_AFTER_IDLE_S``.

    Decision (issue 21, API throughput): SQLAlchemy's ``pool_pre_ping`` pings on every checkout,
    and every ``with session.begin()`` block checks a connection out: a search creation paid five
    extra round trips to the database. A connection idle for a while is the one a database restart
    or an idle timeout may have closed, so it is still pinged (a dead one is replaced: the pool
    retries the checkout on ``DisconnectionError``). One used within the last seconds is handed
    out as it is; if the database went away since, that request fails and the pool, seeing the
    disconnect, invalidates every older connection (SQLAlchemy's optimistic disconnect handling).
    """

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _fresh(_dbapi_connection: Any, record: Any) -> None:
        record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if time.monotonic() - record.info.get("checked_in_at", 0.0) < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as e:  # any driver error: the connection is unusable
            raise exc.DisconnectionError(f"pooled connection failed its ping: {e}") from e


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers (the dashboard) proceed while a writer (a worker's report) commits.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose loaded objects stay readable after commit (domain objects are built inside)."""
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)


def alembic_config(url: str) -> Config:
    """The packaged Alembic configuration pointed at ``url`` (works from an installed package)."""
    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(ALEMBIC_INI.parent / "migrations"))
    cfg.attributes["database_url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` (``strategist db upgrade``)."""
    command.upgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    """The newest migration shipped with the package."""
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The migration the database is at (None for an empty database)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def at_head(engine: Engine) -> bool:
    """True when the database schema is at the newest shipped migration."""
    return current_revision(engine) == head_revision()


def ping(engine: Engine) -> None:
    """Run ``SELECT 1``; raises if the database is unreachable."""
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


def affected(result: Result[Any]) -> int:
    """Rows an UPDATE/DELETE matched: how a conditional UPDATE tells whether this caller won."""
    return int(cast(CursorResult[Any], result).rowcount)
