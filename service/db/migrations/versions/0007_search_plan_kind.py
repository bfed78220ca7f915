"""Searches name the kind of plan they look for and its options (issues 17, 18, 19).

``plan_kind``: 'sync' (AutoSync synchronization strategies, every search before this
revision), 'pipeline' (Ada-Grouper kFkB pipeline plans), 'hybrid' (Whale TaskGraph plans on
mixed GPUs) or 'heterogeneous' (HeterPS layer-to-resource-type schedules with provisioning).
``plan_options``: the kind's own options as JSON (for example the stage count or "choose" and
the memory per device of a pipeline search, the throughput limit of a cost-objective
heterogeneous search); validated by the API schema of that kind, NULL for 'sync'.

Both live on the search row rather than in new tables: a candidate's and a trial's ``strategy``
JSON already hold whatever plan document the kind produces, and a measurement's ``body`` holds
the kind's measured extras (a pipeline's per-stage timestamps, a hybrid plan's per-device busy
time).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 11:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PLAN_KINDS = ("sync", "pipeline", "hybrid", "heterogeneous")


def upgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.add_column(sa.Column("plan_kind", sa.String(length=16), nullable=False, server_default="sync"))
        batch.add_column(sa.Column("plan_options", sa.JSON(), nullable=True))
        batch.create_check_constraint(
            "plan_kind", "plan_kind IN (" + ", ".join(repr(k) for k in PLAN_KINDS) + ")"
        )


def downgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.drop_constraint("plan_kind", type_="check")
        batch.drop_column("plan_options")
        batch.drop_column("plan_kind")
