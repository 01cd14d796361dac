"""teams_conversations: the Teams conversation reference (serviceUrl, conversation id) of each
thread, for proactive messages.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "teams_conversations",
        _ops.ident("tenant_id"),
        _ops.ident("channel_key"),
        _ops.ident("thread_key"),
        sa.Column("conversation_id", sa.String(512), nullable=False),
        sa.Column("conversation_type", sa.String(32), nullable=False),
        sa.Column("service_url", sa.String(512), nullable=False),
        _ops.document("reference"),
        _ops.timestamp("updated_at"),
        sa.PrimaryKeyConstraint(
            "tenant_id", "channel_key", "thread_key", name="pk_teams_conversations"
        ),
    )


def downgrade() -> None:
    op.drop_table("teams_conversations")
