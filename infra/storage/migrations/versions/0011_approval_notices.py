"""Cross-platform approvals: one card row per approval *and platform*, and approval_notices,
the durable queue through which a decision taken on one platform reaches the others.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from alembic.operations import BatchOperations

from infra.storage.migrations import _ops

# Written against 0008; chained after the teams branch's 0010 at its merge.
revision, down_revision = "0011", "0010"

_WIDENED = (
    "card_channel_id",
    "card_ts",
    "requester_channel_id",
    "requester_thread_ts",
    "requester_note_ts",
)


def _resize(batch: BatchOperations, length: int, new_length: int) -> None:
    for column in _WIDENED:
        batch.alter_column(
            column,
            existing_type=sa.String(length),
            type_=sa.String(new_length),
            existing_nullable=column == "requester_note_ts",
        )


def upgrade() -> None:
    with op.batch_alter_table("chat_approval_messages") as batch:
        batch.drop_constraint("pk_chat_approval_messages", type_="primary")
        batch.create_primary_key("pk_chat_approval_messages", ["approval_id", "platform"])
        _resize(batch, 64, 255)
        batch.add_column(sa.Column("service_url", sa.String(512), nullable=True))
    _ops.create_table(
        "approval_notices",
        [sa.Column("notice_id", sa.String(191), nullable=False)],
        _ops.ident("approval_id"),
        _ops.platform(),
        sa.Column("kind", sa.String(16), nullable=False),
        _ops.document("payload", nullable=True),
        *_ops.lease_columns(),
        _ops.timestamp("done_at", nullable=True),
    )
    op.create_index(
        "ix_approval_notices_platform_status",
        "approval_notices",
        ["platform", "status", "created_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_approval_notices_platform_status", table_name="approval_notices")
    op.drop_table("approval_notices")
    # A second platform's rows cannot survive the old single-column key.
    op.execute("DELETE FROM chat_approval_messages WHERE platform <> 'slack'")
    with op.batch_alter_table("chat_approval_messages") as batch:
        batch.drop_column("service_url")
        _resize(batch, 255, 64)
        batch.drop_constraint("pk_chat_approval_messages", type_="primary")
        batch.create_primary_key("pk_chat_approval_messages", ["approval_id"])
