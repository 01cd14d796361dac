"""approvals.resume_claimed_at / resumed_at: each approved call runs on its own decision and
the paused run resumes once per batch; account_links.broken_at: a link whose refresh failed.

An approved write call now runs at once; the run of its model step resumes when the last call
of the step is decided, exactly once (``resume_claimed_at`` is the claim, ``resumed_at`` says
it finished). Rows decided before this revision were resumed by the old flow: they count as
resumed. ``broken_at`` marks a link the IdP refused at a click, so ``/ops status`` and App
Home say "reconnect" until the person links again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0009", "0008"

OPEN = ("pending", "deciding", "approved", "executing")


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(_ops.timestamp("resume_claimed_at", nullable=True))
        batch.add_column(_ops.timestamp("resumed_at", nullable=True))
    approvals = sa.table(
        "approvals",
        sa.column("status", sa.String),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("decided_at", sa.DateTime(timezone=True)),
        sa.column("resume_claimed_at", sa.DateTime(timezone=True)),
        sa.column("resumed_at", sa.DateTime(timezone=True)),
    )
    done = sa.func.coalesce(approvals.c.decided_at, approvals.c.created_at)
    op.execute(
        approvals.update()
        .where(approvals.c.status.not_in(OPEN))
        .values(resume_claimed_at=done, resumed_at=done)
    )
    with op.batch_alter_table("account_links") as batch:
        batch.add_column(_ops.timestamp("broken_at", nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("account_links") as batch:
        batch.drop_column("broken_at")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("resumed_at")
        batch.drop_column("resume_claimed_at")
