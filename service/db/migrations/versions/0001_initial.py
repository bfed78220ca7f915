"""Initial schema: users, tokens, specs, searches, rounds, candidates, trials, measurements, runtimes.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-22 02:01:17.712285
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "simulator_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("domain", sa.String(length=401), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("n_records", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_simulator_versions")),
        sa.UniqueConstraint("domain", "kind", "version", name="uq_simulator_versions_dkv"),
    )
    with op.batch_alter_table("simulator_versions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_simulator_versions_domain"), ["domain"], unique=False)

    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("role IN ('user', 'worker', 'admin')", name=op.f("ck_users_role")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_user_id"), ["user_id"], unique=False)

    op.create_table(
        "retrain_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("domain", sa.String(length=401), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("requested_by", sa.Integer(), nullable=True),
        sa.Column("simulator_version_id", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('pending', 'running', 'done', 'failed')", name=op.f("ck_retrain_requests_state")
        ),
        sa.ForeignKeyConstraint(
            ["requested_by"],
            ["users.id"],
            name=op.f("fk_retrain_requests_requested_by_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["simulator_version_id"],
            ["simulator_versions.id"],
            name=op.f("fk_retrain_requests_simulator_version_id_simulator_versions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retrain_requests")),
    )
    with op.batch_alter_table("retrain_requests", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_retrain_requests_domain"), ["domain"], unique=False)

    op.create_table(
        "specs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('model', 'cluster')", name=op.f("ck_specs_kind")),
        sa.CheckConstraint("origin IN ('upload', 'zoo')", name=op.f("ck_specs_origin")),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_specs_owner_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_specs")),
    )
    with op.batch_alter_table("specs", schema=None) as batch_op:
        batch_op.create_index("ix_specs_kind_name", ["kind", "name"], unique=False)
        batch_op.create_index(batch_op.f("ix_specs_owner_id"), ["owner_id"], unique=False)

    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("clusters", sa.JSON(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_workers_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
        sa.UniqueConstraint("name", name=op.f("uq_workers_name")),
    )
    op.create_table(
        "searches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("model_spec_id", sa.Integer(), nullable=False),
        sa.Column("cluster_spec_id", sa.Integer(), nullable=False),
        sa.Column("model_name", sa.String(length=200), nullable=False),
        sa.Column("cluster_name", sa.String(length=200), nullable=False),
        sa.Column("objective", sa.String(length=16), nullable=False),
        sa.Column("trial_budget", sa.Integer(), nullable=False),
        sa.Column("candidates_per_round", sa.Integer(), nullable=False),
        sa.Column("samples_per_round", sa.Integer(), nullable=False),
        sa.Column("approval_required", sa.Boolean(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=24), nullable=False),
        sa.Column("current_round", sa.Integer(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("objective IN ('time', 'cost')", name=op.f("ck_searches_objective")),
        sa.CheckConstraint(
            "state IN ('pending', 'running', 'awaiting_approval', 'completed', 'cancelled', 'failed')",
            name=op.f("ck_searches_state"),
        ),
        sa.ForeignKeyConstraint(
            ["cluster_spec_id"], ["specs.id"], name=op.f("fk_searches_cluster_spec_id_specs")
        ),
        sa.ForeignKeyConstraint(
            ["model_spec_id"], ["specs.id"], name=op.f("fk_searches_model_spec_id_specs")
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name=op.f("fk_searches_owner_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_searches")),
    )
    with op.batch_alter_table("searches", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_searches_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_searches_state"), ["state"], unique=False)

    op.create_table(
        "rounds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("search_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=24), nullable=False),
        sa.Column("simulator_version_id", sa.Integer(), nullable=True),
        sa.Column("simulator_kind", sa.String(length=32), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('proposed', 'awaiting_approval', 'running', 'completed', 'cancelled')",
            name=op.f("ck_rounds_state"),
        ),
        sa.ForeignKeyConstraint(
            ["search_id"], ["searches.id"], name=op.f("fk_rounds_search_id_searches"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["simulator_version_id"],
            ["simulator_versions.id"],
            name=op.f("fk_rounds_simulator_version_id_simulator_versions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rounds")),
        sa.UniqueConstraint("search_id", "index", name="uq_rounds_search_index"),
    )
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("search_id", sa.Integer(), nullable=False),
        sa.Column("round_id", sa.Integer(), nullable=False),
        sa.Column("round_index", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.JSON(), nullable=False),
        sa.Column("predicted_time", sa.Float(), nullable=False),
        sa.Column("similarity", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('proposed', 'approved', 'rejected')", name=op.f("ck_candidates_status")
        ),
        sa.ForeignKeyConstraint(
            ["round_id"], ["rounds.id"], name=op.f("fk_candidates_round_id_rounds"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["search_id"], ["searches.id"], name=op.f("fk_candidates_search_id_searches"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidates")),
        sa.UniqueConstraint("round_id", "rank", name="uq_candidates_round_rank"),
    )
    with op.batch_alter_table("candidates", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_candidates_round_id"), ["round_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_candidates_search_id"), ["search_id"], unique=False)

    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("search_id", sa.Integer(), nullable=False),
        sa.Column("round_index", sa.Integer(), nullable=True),
        sa.Column("candidate_id", sa.Integer(), nullable=True),
        sa.Column("baseline", sa.String(length=64), nullable=True),
        sa.Column("cluster_name", sa.String(length=200), nullable=False),
        sa.Column("strategy", sa.JSON(), nullable=False),
        sa.Column("predicted_time", sa.Float(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("claim_token", sa.String(length=64), nullable=True),
        sa.Column("claimed_by", sa.String(length=200), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("stop_requested", sa.Boolean(), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name=op.f("ck_trials_state")
        ),
        sa.CheckConstraint(
            "(candidate_id IS NULL) <> (baseline IS NULL)", name=op.f("ck_trials_candidate_or_baseline")
        ),
        sa.ForeignKeyConstraint(
            ["candidate_id"],
            ["candidates.id"],
            name=op.f("fk_trials_candidate_id_candidates"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["search_id"], ["searches.id"], name=op.f("fk_trials_search_id_searches"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trials")),
        sa.UniqueConstraint("candidate_id", name="uq_trials_candidate_id"),
        sa.UniqueConstraint("search_id", "baseline", name="uq_trials_search_baseline"),
    )
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_trials_search_id"), ["search_id"], unique=False)
        batch_op.create_index("ix_trials_state_cluster", ["state", "cluster_name"], unique=False)

    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("iteration_times", sa.JSON(), nullable=False),
        sa.Column("median_time", sa.Float(), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trial_id"], ["trials.id"], name=op.f("fk_measurements_trial_id_trials"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_measurements")),
        sa.UniqueConstraint("trial_id", name=op.f("uq_measurements_trial_id")),
    )
    op.create_table(
        "runtime_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("domain", sa.String(length=401), nullable=False),
        sa.Column("model_name", sa.String(length=200), nullable=False),
        sa.Column("cluster_name", sa.String(length=200), nullable=False),
        sa.Column("strategy", sa.JSON(), nullable=False),
        sa.Column("iteration_times", sa.JSON(), nullable=False),
        sa.Column("median_time", sa.Float(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("search_id", sa.Integer(), nullable=True),
        sa.Column("trial_id", sa.Integer(), nullable=True),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("source IN ('trial', 'user')", name=op.f("ck_runtime_records_source")),
        sa.ForeignKeyConstraint(
            ["search_id"],
            ["searches.id"],
            name=op.f("fk_runtime_records_search_id_searches"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["trial_id"], ["trials.id"], name=op.f("fk_runtime_records_trial_id_trials"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_runtime_records_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runtime_records")),
        sa.UniqueConstraint("trial_id", name=op.f("uq_runtime_records_trial_id")),
    )
    with op.batch_alter_table("runtime_records", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runtime_records_domain"), ["domain"], unique=False)
        batch_op.create_index(batch_op.f("ix_runtime_records_search_id"), ["search_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runtime_records", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runtime_records_search_id"))
        batch_op.drop_index(batch_op.f("ix_runtime_records_domain"))

    op.drop_table("runtime_records")
    op.drop_table("measurements")
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index("ix_trials_state_cluster")
        batch_op.drop_index(batch_op.f("ix_trials_search_id"))

    op.drop_table("trials")
    with op.batch_alter_table("candidates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_candidates_search_id"))
        batch_op.drop_index(batch_op.f("ix_candidates_round_id"))

    op.drop_table("candidates")
    op.drop_table("rounds")
    with op.batch_alter_table("searches", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_searches_state"))
        batch_op.drop_index(batch_op.f("ix_searches_owner_id"))

    op.drop_table("searches")
    op.drop_table("workers")
    with op.batch_alter_table("specs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_specs_owner_id"))
        batch_op.drop_index("ix_specs_kind_name")

    op.drop_table("specs")
    with op.batch_alter_table("retrain_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_retrain_requests_domain"))

    op.drop_table("retrain_requests")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_user_id"))

    op.drop_table("api_tokens")
    op.drop_table("users")
    with op.batch_alter_table("simulator_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_simulator_versions_domain"))

    op.drop_table("simulator_versions")
