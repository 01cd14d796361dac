"""threads: conversation ids and their owners

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "threads",
        sa.Column("thread_id", sa.String(64), nullable=False),
        sa.Column("owner_subject", sa.String(255), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("team_id", sa.String(64), nullable=False),
        sa.Column("channel_id", sa.String(64), nullable=False),
        sa.Column("thread_ts", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
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
