"""The PostgreSQL pool pings a connection only after it idled (service.db.engine._ping_when_idle):
a connection killed while idle is replaced before use, one killed while busy fails one request
and the pool recovers on the next."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError

from service.db import engine as engine_module
from service.db.engine import make_engine


@pytest.fixture
def pg(_postgres_database: str) -> Engine:
    return make_engine(_postgres_database)


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _kill(url: str, pid: int) -> None:
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
    admin.dispose()


def _pings(engine: Engine) -> list[object]:
    """Record each ping the dialect sends."""
    seen: list[object] = []
    ping = engine.dialect.do_ping

    def counting(dbapi_connection: object) -> bool:
        seen.append(dbapi_connection)
        return ping(dbapi_connection)

    engine.dialect.do_ping = counting  # type: ignore[method-assign]
    return seen


def test_a_recently_used_connection_is_not_pinged(pg: Engine) -> None:
    pings = _pings(pg)
    for _ in range(5):
        _backend_pid(pg)
    assert pings == []
    pg.dispose()


def test_an_idle_connection_killed_by_the_server_is_replaced(
    pg: Engine, _postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = _backend_pid(pg)
    _kill(_postgres_database, pid)
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 0.0)  # every connection counts as idle
    assert _backend_pid(pg) != pid  # the ping failed, the pool connected anew, the query succeeded
    pg.dispose()


def test_a_busy_connection_killed_by_the_server_fails_once(pg: Engine, _postgres_database: str) -> None:
    pid = _backend_pid(pg)
    _kill(_postgres_database, pid)
    with pytest.raises(DBAPIError) as e:
        _backend_pid(pg)
    assert e.value.connection_invalidated
    assert _backend_pid(pg) != pid
    pg.dispose()


def _pids_of_concurrent(engine: Engine, n: int) -> set[int]:
    """Backend pids of ``n`` connections held at once (then all returned)."""
    held = [engine.connect() for _ in range(n)]
    pids = {int(c.execute(text("SELECT pg_backend_pid()")).scalar_one()) for c in held}
    for c in held:
        c.close()
    return pids


def test_a_sized_pool_keeps_every_connection_it_opens(_postgres_database: str) -> None:
    """The API's pool (``pool_size``): every connection opened is kept, so a second burst reuses
    them; the default pool closes what it opened past its 5 on return (new sessions next time)."""
    sized = make_engine(_postgres_database, pool_size=8)
    first = _pids_of_concurrent(sized, 8)
    assert len(first) == 8 and _pids_of_concurrent(sized, 8) == first and sized.pool.size() == 8  # type: ignore[attr-defined]
    sized.dispose()
    default = make_engine(_postgres_database)
    first = _pids_of_concurrent(default, 8)
    assert len(first) == 8 and len(_pids_of_concurrent(default, 8) - first) == 3
    default.dispose()
