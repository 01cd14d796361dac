"""agent_runs: one row per agent run, so Stop reaches a run on whichever instance runs it.

Revision ID: 0011
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_runs",
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("thread_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("stopped_by", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_agent_runs"),
    )
    op.create_index("ix_agent_runs_thread_id_state", "agent_runs", ["thread_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_agent_runs_thread_id_state", table_name="agent_runs")
    op.drop_table("agent_runs")
