"""agent_runs: one row per agent run, so Stop reaches a run on whichever instance runs it.

Revision ID: 0012
Revises: 0011 (written against 0008; chained after 0011_approval_notices at the merge)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_runs",
        _ops.ident("run_id"),
        _ops.ident("thread_id"),
        sa.Column("state", sa.String(16), nullable=False),
        _ops.timestamp("started_at"),
        _ops.timestamp("stopped_at", nullable=True),
        _ops.person("stopped_by", nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_agent_runs"),
    )
    op.create_index("ix_agent_runs_thread_id_state", "agent_runs", ["thread_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_agent_runs_thread_id_state", table_name="agent_runs")
    op.drop_table("agent_runs")
