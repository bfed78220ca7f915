"""The Alembic migrations build exactly the ORM's schema, on SQLite and on PostgreSQL, and go down again."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from service.db.engine import alembic_config, at_head, current_revision, head_revision, make_engine, upgrade
from service.db.models import Base


def test_migrated_schema_matches_the_models(engine: Engine) -> None:
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diffs == []
    assert at_head(engine) and current_revision(engine) == head_revision() == "0012"


def test_sqlite_pragmas(tmp_path: Path) -> None:
    eng = make_engine(f"sqlite:///{tmp_path / 'sub' / 'x.db'}")  # the folder is created
    with eng.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
    eng.dispose()


def test_downgrade_to_base_and_up_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    upgrade(url)
    command.downgrade(alembic_config(url), "base")
    eng = make_engine(url)
    assert set(inspect(eng).get_table_names()) == {"alembic_version"}
    assert current_revision(eng) is None and not at_head(eng)
    upgrade(url)
    assert set(inspect(eng).get_table_names()) == {t.name for t in Base.metadata.sorted_tables} | {
        "alembic_version"
    }
    eng.dispose()


def test_postgres_url_without_driver_uses_psycopg() -> None:
    eng = make_engine("postgresql://u@127.0.0.1:1/db")
    assert eng.dialect.driver == "psycopg"
    eng.dispose()
