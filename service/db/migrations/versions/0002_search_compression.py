"""Searches record their compression opt-in (issue 14): 'none' (lossless, the default) | fp16 | powersgd | all.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 11:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        # Searches created before this revision sampled every compressor: record them as 'all'.
        batch.add_column(sa.Column("compression", sa.String(length=16), nullable=False, server_default="all"))
        batch.create_check_constraint(
            op.f("ck_searches_compression"), "compression IN ('none', 'fp16', 'powersgd', 'all')"
        )
    with op.batch_alter_table("searches") as batch:
        batch.alter_column("compression", server_default="none", existing_type=sa.String(length=16))


def downgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.drop_constraint(op.f("ck_searches_compression"), type_="check")
        batch.drop_column("compression")
