"""teams_conversations: the Teams conversation reference (serviceUrl, conversation id) of each
thread, for proactive messages.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0010", "0009"


def upgrade() -> None:
    _ops.create_table(
        "teams_conversations",
        [_ops.ident("tenant_id"), _ops.ident("channel_key"), _ops.ident("thread_key")],
        sa.Column("conversation_id", sa.String(512), nullable=False),
        sa.Column("conversation_type", sa.String(32), nullable=False),
        sa.Column("service_url", sa.String(512), nullable=False),
        _ops.document("reference"),
        _ops.timestamp("updated_at"),
    )


def downgrade() -> None:
    op.drop_table("teams_conversations")
