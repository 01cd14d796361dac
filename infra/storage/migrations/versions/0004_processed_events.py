"""processed_events (Slack event deduplication) and chat_approval_messages

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "processed_events",
        sa.Column("event_id", sa.String(128), nullable=False),
        _ops.platform(),
        _ops.timestamp("received_at"),
        sa.PrimaryKeyConstraint("event_id", name="pk_processed_events"),
    )
    op.create_index("ix_processed_events_received_at", "processed_events", ["received_at"])
    op.create_table(
        "chat_approval_messages",
        _ops.ident("approval_id"),
        _ops.platform(),
        _ops.ident("team_id"),
        _ops.ident("card_channel_id"),
        _ops.ident("card_ts"),
        _ops.ident("requester_channel_id"),
        _ops.ident("requester_thread_ts"),
        _ops.timestamp("created_at"),
        sa.PrimaryKeyConstraint("approval_id", name="pk_chat_approval_messages"),
    )


def downgrade() -> None:
    op.drop_table("chat_approval_messages")
    op.drop_index("ix_processed_events_received_at", table_name="processed_events")
    op.drop_table("processed_events")
