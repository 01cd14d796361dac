"""mcp_oauth_tokens: each user's encrypted OAuth grant per MCP server (``auth: oauth``)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0008", "0007"


def upgrade() -> None:
    _ops.create_table(
        "mcp_oauth_tokens",
        [_ops.person("subject"), sa.Column("server", sa.String(255), nullable=False)],
        _ops.sealed("grant_encrypted"),
        _ops.timestamp("updated_at"),
    )


def downgrade() -> None:
    op.drop_table("mcp_oauth_tokens")
