"""`strategist token create|list|revoke` and `strategist db upgrade|current`: administering the service."""

from __future__ import annotations

from typing import cast

import typer
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from service.db import repository as repo
from service.db.engine import current_revision, head_revision, make_engine, session_factory, upgrade
from service.domain import ROLES, Conflict, NotFound, Role
from service.settings import Settings
from simulator.spec.limits import printable_issue

token_app = typer.Typer(help="API tokens (stored hashed; the secret is printed once).", no_args_is_help=True)
db_app = typer.Typer(help="The service database (URL from STRATEGIST_DATABASE_URL).", no_args_is_help=True)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _sessions(settings: Settings) -> tuple[Engine, sessionmaker[Session]]:
    if settings.embedded_database:
        settings.ensure_dirs()
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    return engine, session_factory(engine)


@token_app.command("create")
def token_create(
    role: str = typer.Option(..., "--role", help="user, worker or admin."),
    name: str = typer.Option("", "--name", help="User name (created if new); default: the role."),
) -> None:
    """Create an API token and print its secret (shown this once; only its hash is stored)."""
    if role not in ROLES:
        raise _fail(f"--role: must be one of {', '.join(ROLES)}, not {role!r}")
    if name and (issue := printable_issue(name)):
        raise _fail(f"--name: {issue}")
    settings = Settings()
    engine, sessions = _sessions(settings)
    try:
        with sessions() as session:
            issued = repo.create_token(session, name=name or role, role=cast(Role, role))
    except Conflict as e:
        raise _fail(f"--name: {e}") from None
    finally:
        engine.dispose()
    typer.echo(issued.secret)
    typer.echo(
        f"token {issued.info.id} ({issued.info.prefix}...) for {issued.info.role} {issued.info.name!r}",
        err=True,
    )


@token_app.command("list")
def token_list() -> None:
    """List tokens (prefixes only)."""
    settings = Settings()
    engine, sessions = _sessions(settings)
    try:
        with sessions() as session:
            infos = repo.list_tokens(session)
    finally:
        engine.dispose()
    for t in infos:
        state = "revoked" if t.revoked else "active"
        typer.echo(f"{t.id}\t{t.prefix}...\t{t.role}\t{t.name}\t{state}\t{t.created_at:%Y-%m-%d %H:%M}")


@token_app.command("revoke")
def token_revoke(token_id: int = typer.Argument(..., help="Token id (from `token list`).")) -> None:
    """Revoke a token; it stops authenticating at once."""
    settings = Settings()
    engine, sessions = _sessions(settings)
    try:
        with sessions() as session:
            info = repo.revoke_token(session, token_id=token_id)
    except NotFound as e:
        raise _fail(f"token_id: {e.args[0]}") from None
    finally:
        engine.dispose()
    typer.echo(f"revoked token {info.id} ({info.prefix}...) of {info.name!r}")


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Option("head", help="Target migration.")) -> None:
    """Apply the database migrations (creates the SQLite file if needed)."""
    settings = Settings()
    if settings.embedded_database:
        settings.ensure_dirs()
    try:
        upgrade(settings.database_url, revision)
    except Exception as e:  # a bad URL or unreachable server: one line, not a traceback
        raise _fail(f"database_url: {type(e).__name__}: {e}") from None
    engine = make_engine(settings.database_url)
    try:
        typer.echo(f"database at {current_revision(engine)} (head {head_revision()})")
    finally:
        engine.dispose()


@db_app.command("current")
def db_current() -> None:
    """Print the database's migration and the newest shipped one."""
    settings = Settings()
    engine = make_engine(settings.database_url)
    try:
        typer.echo(f"database at {current_revision(engine)} (head {head_revision()})")
    except Exception as e:
        raise _fail(f"database_url: {type(e).__name__}: {e}") from None
    finally:
        engine.dispose()


def register(app: typer.Typer) -> None:
    """Add the ``token`` and ``db`` command groups to the root app."""
    app.add_typer(token_app, name="token")
    app.add_typer(db_app, name="db")
