"""approvals: outcome_reason, truthful states (executing, succeeded, unknown), batches

One approval per write call: the calls of one model step share ``batch_id``.

Rows decided before this revision said ``approved``/``edited`` whether or not the write
worked; their outcome was never recorded on the approval, so they become ``unknown`` with
a reason pointing at the audit log (which has each write's own outcome).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0006", "0005"

LEGACY_REASON = "decided before opsbot recorded write outcomes; see the audit log"


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("outcome_reason", sa.Text(), nullable=True))
        batch.add_column(_ops.ident("batch_id", nullable=True))
        batch.add_column(sa.Column("batch_index", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("batch_size", sa.Integer(), nullable=False, server_default="1"))
        batch.create_index("ix_approvals_batch_id", ["batch_id"])
    approvals = sa.table(
        "approvals", sa.column("status", sa.String), sa.column("outcome_reason", sa.Text)
    )
    op.execute(
        approvals.update()
        .where(approvals.c.status.in_(["approved", "edited"]))
        .values(status="unknown", outcome_reason=LEGACY_REASON)
    )


def downgrade() -> None:
    approvals = sa.table("approvals", sa.column("status", sa.String))
    op.execute(
        approvals.update()
        .where(approvals.c.status.in_(["executing", "succeeded", "unknown"]))
        .values(status="approved")
    )
    with op.batch_alter_table("approvals") as batch:
        batch.drop_index("ix_approvals_batch_id")
        batch.drop_column("batch_size")
        batch.drop_column("batch_index")
        batch.drop_column("batch_id")
        batch.drop_column("outcome_reason")
