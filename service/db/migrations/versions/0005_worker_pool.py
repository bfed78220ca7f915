"""Workers advertise their pool (testbed or gpu): the API and dashboard show live workers per pool (issue 21).

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-23 14:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("pool", sa.String(length=64), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("pool")
