"""chat_approval_messages.requester_note_ts: the requester's "needs approval" note, so the
decision can update it in place.
"""

from __future__ import annotations

from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0007", "0006"


def upgrade() -> None:
    with op.batch_alter_table("chat_approval_messages") as batch:
        batch.add_column(_ops.ident("requester_note_ts", nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_approval_messages") as batch:
        batch.drop_column("requester_note_ts")
