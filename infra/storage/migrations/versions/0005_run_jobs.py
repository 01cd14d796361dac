"""run_jobs (durable runs: one job per accepted chat message, leased by a worker)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_jobs",
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("user_key", sa.String(255), nullable=False),
        _ops.document("payload"),
        *_ops.lease_columns(),
        _ops.timestamp("finished_at", nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name="pk_run_jobs"),
    )
    op.create_index("ix_run_jobs_status_created", "run_jobs", ["status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_run_jobs_status_created", table_name="run_jobs")
    op.drop_table("run_jobs")
