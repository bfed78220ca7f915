"""`strategist db upgrade|current` and `strategist token create|list|revoke` against a real database."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from service.cli import app
from service.db import repository as repo
from service.db.engine import make_engine, session_factory


@pytest.fixture
def env(database_url: str, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The commands' environment: the (cleared) test database of this backend."""
    monkeypatch.setenv("STRATEGIST_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("STRATEGIST_DATABASE_URL", database_url)
    return database_url


def test_db_upgrade_creates_a_fresh_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATEGIST_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("STRATEGIST_DATABASE_URL", raising=False)
    r = CliRunner().invoke(app, ["db", "upgrade"])
    assert r.exit_code == 0 and r.output.strip() == "database at 0012 (head 0012)"
    assert (tmp_path / "data" / "strategist.db").is_file()


def test_db_upgrade_and_current(env: str) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["db", "upgrade"])
    assert r.exit_code == 0 and r.output.strip() == "database at 0012 (head 0012)"
    r = runner.invoke(app, ["db", "current"])
    assert r.exit_code == 0 and r.output.strip() == "database at 0012 (head 0012)"


def test_db_upgrade_reports_a_bad_url_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STRATEGIST_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("STRATEGIST_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    r = CliRunner().invoke(app, ["db", "upgrade"])
    assert r.exit_code == 2 and r.output.startswith("error: database_url: OperationalError")


def test_token_create_list_revoke(env: str) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["token", "create", "--role", "worker", "--name", "gpu-1"])
    assert r.exit_code == 0
    secret = r.stdout.strip().splitlines()[0]
    assert secret.startswith("stg_")
    engine = make_engine(env)
    with session_factory(engine)() as session:
        p = repo.verify_token(session, secret=secret)
    assert p is not None and (p.name, p.role) == ("gpu-1", "worker")
    r = runner.invoke(app, ["token", "list"])
    assert r.exit_code == 0 and "\tworker\tgpu-1\tactive\t" in r.output and secret not in r.output
    r = runner.invoke(app, ["token", "revoke", "1"])
    assert r.exit_code == 0 and "revoked token 1" in r.output
    with session_factory(engine)() as session:
        assert repo.verify_token(session, secret=secret) is None
    engine.dispose()
    r = runner.invoke(app, ["token", "revoke", "7"])
    assert r.exit_code == 2 and "token_id: no token 7" in r.output
    r = runner.invoke(app, ["token", "create", "--role", "boss"])
    assert r.exit_code == 2 and "--role: must be one of user, worker, admin" in r.output
    r = runner.invoke(app, ["token", "create", "--role", "admin", "--name", "gpu-1"])
    assert r.exit_code == 2 and "--name: user 'gpu-1' exists with role 'worker'" in r.output
