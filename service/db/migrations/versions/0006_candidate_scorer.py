"""Candidates record which scorer ranked them and its uncertainty (issue 16 item 3).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 15:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("candidates") as batch:
        # Candidates of earlier rounds were all ranked by the round's one simulator; 'analytical'
        # is what cold-start rounds used (the round's simulator_kind has the exact one).
        batch.add_column(
            sa.Column("scorer", sa.String(length=32), nullable=False, server_default="analytical")
        )
        batch.add_column(sa.Column("uncertainty", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("candidates") as batch:
        batch.drop_column("uncertainty")
        batch.drop_column("scorer")
