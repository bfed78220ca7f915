"""The user's own model and where a runtime was measured (issue 41).

``searches.model_factory``: ``module:function`` returning the user's ``nn.Module`` and a batch
factory; agent-pool trials of such a search run that module (``runtime.executor.user_model``).
``runtime_records.measured_on``: where the runtime was measured (``simulator.spec.measurement.
MeasuredOn``: site 'testbed' or 'cluster', GPU types, torchrun run id); NULL for records from
before this revision and for user-ingested runtimes that did not say.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 02:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.add_column(sa.Column("model_factory", sa.String(length=300), nullable=True))
    with op.batch_alter_table("runtime_records") as batch:
        batch.add_column(sa.Column("measured_on", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runtime_records") as batch:
        batch.drop_column("measured_on")
    with op.batch_alter_table("searches") as batch:
        batch.drop_column("model_factory")
