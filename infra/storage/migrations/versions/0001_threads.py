"""threads: conversation ids and their owners

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "threads",
        _ops.ident("thread_id"),
        _ops.person("owner_subject"),
        _ops.platform(),
        _ops.ident("team_id"),
        _ops.ident("channel_id"),
        _ops.ident("thread_ts"),
        _ops.timestamp("created_at"),
        sa.PrimaryKeyConstraint("thread_id", name="pk_threads"),
    )
    op.create_index(
        "uq_threads_platform_ref",
        "threads",
        ["platform", "team_id", "channel_id", "thread_ts"],
        unique=True,
    )
    op.create_index("ix_threads_owner_subject", "threads", ["owner_subject"])


def downgrade() -> None:
    op.drop_table("threads")
