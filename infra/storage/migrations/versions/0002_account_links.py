"""account_links and link_logins: chat user → IdP subject, encrypted refresh tokens

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "account_links",
        _ops.platform(),
        _ops.ident("team_id"),
        _ops.ident("user_id"),
        _ops.person("subject"),
        sa.Column("email", sa.String(320), nullable=False),
        _ops.sealed("refresh_token_encrypted"),
        _ops.timestamp("created_at"),
        _ops.timestamp("updated_at"),
        sa.PrimaryKeyConstraint("platform", "team_id", "user_id", name="pk_account_links"),
    )
    op.create_index("ix_account_links_subject", "account_links", ["subject"])
    op.create_table(
        "link_logins",
        _ops.ident("nonce"),
        _ops.platform(),
        _ops.ident("team_id"),
        _ops.ident("user_id"),
        _ops.sealed("code_verifier_encrypted"),
        _ops.timestamp("expires_at"),
        sa.PrimaryKeyConstraint("nonce", name="pk_link_logins"),
    )
    op.create_index("ix_link_logins_expires_at", "link_logins", ["expires_at"])


def downgrade() -> None:
    op.drop_table("link_logins")
    op.drop_table("account_links")
