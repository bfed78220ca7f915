"""Alembic migrations of the service database (a package so that wheels ship them)."""
