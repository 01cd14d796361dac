"""run_jobs (durable runs: one job per accepted chat message, leased by a worker)"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0005", "0004"


def upgrade() -> None:
    _ops.create_table(
        "run_jobs",
        [_ops.dedup_key("job_id")],
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("user_key", sa.String(255), nullable=False),
        _ops.document("payload"),
        *_ops.lease_columns(),
        _ops.timestamp("finished_at", nullable=True),
        sa.Column("error", sa.String(500), nullable=True),
    )
    op.create_index("ix_run_jobs_status_created", "run_jobs", ["status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_run_jobs_status_created", table_name="run_jobs")
    op.drop_table("run_jobs")
