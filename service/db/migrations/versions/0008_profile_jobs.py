"""Profile jobs (issue 15): a queued request to measure a model's per-layer compute on a GPU pool.

A user queues (model, batch, dtype, device name); a worker of pool 'gpu' claims the oldest queued
job (or one whose claim is older than the job timeout), runs ``strategist profile``'s measurement
and reports either a Profile, stored in ``profiles`` and linked here, or an error.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 12:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "profile_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("device", sa.String(length=200), nullable=True),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("repeats", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("profile_id", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'done', 'failed')", name=op.f("ck_profile_jobs_state")
        ),
        sa.ForeignKeyConstraint(
            ["profile_id"],
            ["profiles.id"],
            name=op.f("fk_profile_jobs_profile_id_profiles"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_profile_jobs_owner_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_profile_jobs")),
    )
    op.create_index("ix_profile_jobs_state", "profile_jobs", ["state", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_profile_jobs_state", table_name="profile_jobs")
    op.drop_table("profile_jobs")
