"""Persistence: SQLAlchemy 2 tables, Alembic migrations and the data-access functions.

Only this package touches ORM rows. Everything else calls the keyword-only functions re-exported
by `service.db.repository` with a `Session` and gets domain objects (`service.domain`) back.
"""
