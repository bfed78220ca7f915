"""Node agents and gang slots (issue 41): a pool of agents is a cluster; a trial is held by a gang.

Revision ID: 0011
Revises: 0008
Create Date: 2026-12-05 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("rdzv_port", sa.Integer(), nullable=False),
        sa.Column("nic", sa.String(length=64), nullable=False),
        sa.Column("nic_gbps", sa.Float(), nullable=False),
        sa.Column("intra_gbps", sa.Float(), nullable=False),
        sa.Column("device", sa.JSON(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("slot_id", sa.Integer(), nullable=True),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_agents_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agents")),
        sa.UniqueConstraint("name", name=op.f("uq_agents_name")),
    )
    op.create_index("ix_agents_pool", "agents", ["pool", "id"], unique=False)
    op.create_table(
        "gang_slots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("nnodes", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.Integer(), nullable=False),
        sa.Column("claim_token", sa.String(length=64), nullable=False),
        sa.Column("rdzv_endpoint", sa.String(length=260), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('assigned', 'joined', 'done', 'released')", name=op.f("ck_gang_slots_state")
        ),
        sa.ForeignKeyConstraint(
            ["trial_id"], ["trials.id"], name=op.f("fk_gang_slots_trial_id_trials"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_gang_slots_agent_id_agents"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gang_slots")),
        sa.UniqueConstraint("trial_id", "attempt", "node_rank", name="uq_gang_slots_trial_attempt_rank"),
    )
    op.create_index(op.f("ix_gang_slots_trial_id"), "gang_slots", ["trial_id"], unique=False)
    op.create_index(op.f("ix_gang_slots_agent_id"), "gang_slots", ["agent_id"], unique=False)
    op.create_table(
        "pool_specs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("spec_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["spec_id"], ["specs.id"], name=op.f("fk_pool_specs_spec_id_specs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pool_specs")),
        sa.UniqueConstraint("spec_id", name=op.f("uq_pool_specs_spec_id")),
    )
    op.create_index(op.f("ix_pool_specs_pool"), "pool_specs", ["pool"], unique=False)


def downgrade() -> None:
    op.drop_table("pool_specs")
    op.drop_table("gang_slots")
    op.drop_index("ix_agents_pool", table_name="agents")
    op.drop_table("agents")
