"""chat_approval_messages.requester_note_ts: the requester's "needs approval" note, so the
decision can update it in place.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

from infra.storage.migrations import _ops

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chat_approval_messages") as batch:
        batch.add_column(_ops.ident("requester_note_ts", nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_approval_messages") as batch:
        batch.drop_column("requester_note_ts")
