"""approvals and the append-only audit_events log

On PostgreSQL a trigger refuses UPDATE, DELETE and TRUNCATE on ``audit_events`` for every role
the application uses; only a superuser can bypass it (``session_replication_role = replica``,
e.g. for a retention job or to empty a test database). SQLite gets equivalent triggers.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from infra.storage.migrations import _ops

revision, down_revision = "0003", "0002"

_PG_FUNCTION = """
CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$
"""


def upgrade() -> None:
    _ops.create_table(
        "approvals",
        [_ops.ident("approval_id")],
        _ops.ident("thread_id"),
        _ops.person("requester_subject"),
        _ops.document("requester_chat_user", nullable=True),
        _ops.document("actions"),
        _ops.document("reads"),
        _ops.timestamp("created_at"),
        _ops.timestamp("expires_at"),
        sa.Column("status", sa.String(16), nullable=False),
        _ops.person("decided_by", nullable=True),
        _ops.timestamp("decided_at", nullable=True),
        _ops.document("decisions"),
        _ops.document("outcome"),
    )
    op.create_index("ix_approvals_status_expires_at", "approvals", ["status", "expires_at"])
    op.create_index("ix_approvals_requester_subject", "approvals", ["requester_subject"])
    op.create_index("ix_approvals_thread_id", "approvals", ["thread_id"])

    _ops.create_table(
        "audit_events",
        [sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False)],
        _ops.ident("event_id"),
        _ops.timestamp("at"),
        sa.Column("kind", sa.String(32), nullable=False),
        _ops.person("requester", nullable=True),
        _ops.ident("thread_id", nullable=True),
        sa.Column("tool", sa.String(255), nullable=True),
        _ops.document("args_summary", nullable=True),
        sa.Column("outcome", sa.String(64), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("model_used", sa.String(255), nullable=True),
        _ops.ident("approval_id", nullable=True),
        _ops.person("approver", nullable=True),
        sa.Column("decision", sa.String(16), nullable=True),
        _ops.document("edited_args_summary", nullable=True),
        _ops.dedup_key("idempotency_key", nullable=True),
        _ops.document("detail", nullable=True),
        sa.UniqueConstraint("event_id", name="uq_audit_events_event_id"),
    )
    op.create_index("ix_audit_events_requester_at", "audit_events", ["requester", "at"])
    op.create_index("ix_audit_events_thread_id_at", "audit_events", ["thread_id", "at"])
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_index("ix_audit_events_idempotency_key", "audit_events", ["idempotency_key"])

    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(
            "CREATE TRIGGER audit_events_no_update_delete BEFORE UPDATE OR DELETE ON audit_events"
            " FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()"
        )
        op.execute(
            "CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events"
            " FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only()"
        )
    else:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_events_no_{verb.lower()} BEFORE {verb} ON audit_events"
                " BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END"
            )


def downgrade() -> None:
    op.drop_table("audit_events")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS audit_events_append_only()")
    op.drop_table("approvals")
