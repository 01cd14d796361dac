"""agent_runs: one row per agent run, so Stop reaches a run on whichever instance runs it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

# Written against 0008; chained after 0011_approval_notices at the merge.
revision, down_revision = "0012", "0011"


def upgrade() -> None:
    _ops.create_table(
        "agent_runs",
        [_ops.ident("run_id")],
        _ops.ident("thread_id"),
        sa.Column("state", sa.String(16), nullable=False),
        _ops.timestamp("started_at"),
        _ops.timestamp("stopped_at", nullable=True),
        _ops.person("stopped_by", nullable=True),
    )
    op.create_index("ix_agent_runs_thread_id_state", "agent_runs", ["thread_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_agent_runs_thread_id_state", table_name="agent_runs")
    op.drop_table("agent_runs")
