"""mcp_oauth_tokens: each user's encrypted OAuth grant per MCP server (``auth: oauth``).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_oauth_tokens",
        _ops.person("subject"),
        sa.Column("server", sa.String(255), nullable=False),
        _ops.sealed("grant_encrypted"),
        _ops.timestamp("updated_at"),
        sa.PrimaryKeyConstraint("subject", "server", name="pk_mcp_oauth_tokens"),
    )


def downgrade() -> None:
    op.drop_table("mcp_oauth_tokens")
