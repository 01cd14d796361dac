"""account_links and link_logins: chat user → IdP subject, encrypted refresh tokens

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "account_links",
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("team_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("email", sa.String(320), nullable=False),
        sa.Column("refresh_token_encrypted", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("platform", "team_id", "user_id", name="pk_account_links"),
    )
    op.create_index("ix_account_links_subject", "account_links", ["subject"])
    op.create_table(
        "link_logins",
        sa.Column("nonce", sa.String(64), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("team_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("code_verifier_encrypted", sa.String(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("nonce", name="pk_link_logins"),
    )
    op.create_index("ix_link_logins_expires_at", "link_logins", ["expires_at"])


def downgrade() -> None:
    op.drop_table("link_logins")
    op.drop_table("account_links")
