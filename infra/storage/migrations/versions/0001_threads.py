"""threads: conversation ids and their owners"""

from __future__ import annotations

from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0001", None


def upgrade() -> None:
    _ops.create_table(
        "threads",
        [_ops.ident("thread_id")],
        _ops.person("owner_subject"),
        _ops.platform(),
        _ops.ident("team_id"),
        _ops.ident("channel_id"),
        _ops.ident("thread_ts"),
        _ops.timestamp("created_at"),
    )
    op.create_index(
        "uq_threads_platform_ref",
        "threads",
        ["platform", "team_id", "channel_id", "thread_ts"],
        unique=True,
    )
    op.create_index("ix_threads_owner_subject", "threads", ["owner_subject"])


def downgrade() -> None:
    op.drop_table("threads")
