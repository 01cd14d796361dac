"""account_links and link_logins: chat user → IdP subject, encrypted refresh tokens"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0002", "0001"


def upgrade() -> None:
    _ops.create_table(
        "account_links",
        _ops.chat_user_columns(),
        _ops.person("subject"),
        sa.Column("email", sa.String(320), nullable=False),
        _ops.sealed("refresh_token_encrypted"),
        _ops.timestamp("created_at"),
        _ops.timestamp("updated_at"),
    )
    op.create_index("ix_account_links_subject", "account_links", ["subject"])
    _ops.create_table(
        "link_logins",
        [_ops.ident("nonce")],
        *_ops.chat_user_columns(),
        _ops.sealed("code_verifier_encrypted"),
        _ops.timestamp("expires_at"),
    )
    op.create_index("ix_link_logins_expires_at", "link_logins", ["expires_at"])


def downgrade() -> None:
    op.drop_table("link_logins")
    op.drop_table("account_links")
