"""mcp_oauth_tokens: each user's encrypted OAuth grant per MCP server (``auth: oauth``).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_oauth_tokens",
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("server", sa.String(255), nullable=False),
        sa.Column("grant_encrypted", sa.String(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("subject", "server", name="pk_mcp_oauth_tokens"),
    )


def downgrade() -> None:
    op.drop_table("mcp_oauth_tokens")
