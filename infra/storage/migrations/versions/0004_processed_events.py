"""processed_events (Slack event deduplication) and chat_approval_messages"""

from __future__ import annotations

from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0004", "0003"


def upgrade() -> None:
    _ops.create_table(
        "processed_events",
        [_ops.dedup_key("event_id")],
        _ops.platform(),
        _ops.timestamp("received_at"),
    )
    op.create_index("ix_processed_events_received_at", "processed_events", ["received_at"])
    _ops.create_table(
        "chat_approval_messages",
        [_ops.ident("approval_id")],
        _ops.platform(),
        _ops.ident("team_id"),
        _ops.ident("card_channel_id"),
        _ops.ident("card_ts"),
        _ops.ident("requester_channel_id"),
        _ops.ident("requester_thread_ts"),
        _ops.timestamp("created_at"),
    )


def downgrade() -> None:
    op.drop_table("chat_approval_messages")
    op.drop_index("ix_processed_events_received_at", table_name="processed_events")
    op.drop_table("processed_events")
