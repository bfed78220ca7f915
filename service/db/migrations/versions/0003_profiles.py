"""Measured compute profiles (issue 15): per-layer forward/backward seconds keyed by model, device, dtype, batch.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("device", sa.String(length=200), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_profiles_owner_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profiles")),
    )
    op.create_index("ix_profiles_key", "profiles", ["model", "device", "dtype", "batch"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_profiles_key", table_name="profiles")
    op.drop_table("profiles")
