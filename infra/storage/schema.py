"""The tables opsbot owns, defined once for SQLite and PostgreSQL.

Each table arrives with an Alembic migration in ``infra/storage/migrations/versions``;
``tests/test_storage.py`` fails when the migrations and this schema disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)
from sqlalchemy.schema import SchemaItem
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite drops the zone otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: opsbot stores aware UTC timestamps only")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def table(name: str, key: Sequence[Column[Any]], *items: SchemaItem) -> Table:
    """A table of ``metadata``: its primary key's columns (``key``) first, then its other
    columns, indexes and constraints (``items``); the migrations' ``_ops.create_table`` makes
    each table the same way."""
    return Table(name, metadata, *key, *items, PrimaryKeyConstraint(*[c.name for c in key]))


# Column kinds, each with its one size and type, so that a table names what a column holds
# and every table holding one agrees on how it is stored. Migrations have frozen copies of
# these in ``migrations/_ops.py``.
def ident(name: str, *, nullable: bool = False) -> Column[Any]:
    """An opaque id from opsbot or a chat platform: a thread, approval, run, team, user."""
    return Column(name, String(64), nullable=nullable)


def person(name: str, *, nullable: bool = False) -> Column[Any]:
    """Who: an identity provider subject, or who decided or stopped something."""
    return Column(name, String(255), nullable=nullable)


def chat_id(name: str, *, nullable: bool = False) -> Column[Any]:
    """A channel or message id on any chat platform: Teams' (``19:…@thread.tacv2;
    messageid=…``) are longer than Slack's, hence 255."""
    return Column(name, String(255), nullable=nullable)


def dedup_key(name: str, *, nullable: bool = False) -> Column[Any]:
    """A key that makes something happen once: a platform's event id (``processed_events``),
    a job id (``run_jobs``), a write's idempotency key (``audit_events``)."""
    return Column(name, String(128), nullable=nullable)


def timestamp(name: str, *, nullable: bool = False) -> Column[Any]:
    """A moment, stored as an aware UTC timestamp."""
    return Column(name, UtcDateTime(), nullable=nullable)


def document(name: str, *, nullable: bool = False) -> Column[Any]:
    """A JSON value opsbot writes and reads whole."""
    return Column(name, JSON(), nullable=nullable)


def sealed(name: str) -> Column[Any]:
    """A secret encrypted (Fernet) before it reaches the table: the database never sees it."""
    return Column(name, String(), nullable=False)


def platform() -> Column[Any]:
    """Which chat platform a row belongs to (``slack``, ``teams``)."""
    return Column("platform", String(32), nullable=False)


def chat_user_columns() -> list[Column[Any]]:
    """A chat user: platform, workspace or tenant, and the user's id there."""
    return [
        platform(),
        ident("team_id"),
        ident("user_id"),
    ]


# A thread's place on its platform (``agent_core.threads.PlatformRef``).
PLATFORM_REF = ("platform", "team_id", "channel_id", "thread_ts")


def lease_columns() -> list[Column[Any]]:
    """A durable work queue's row state (``run_jobs``, ``approval_notices``): its status, how
    often it was tried, which worker holds it and until when, and when it was queued."""
    return [
        Column("status", String(16), nullable=False),
        Column("attempts", Integer(), nullable=False),
        ident("owner", nullable=True),
        timestamp("lease_until", nullable=True),
        timestamp("created_at"),
    ]


threads = table(
    "threads",
    [ident("thread_id")],
    person("owner_subject"),
    platform(),
    ident("team_id"),
    ident("channel_id"),
    ident("thread_ts"),
    timestamp("created_at"),
    Index("uq_threads_platform_ref", *PLATFORM_REF, unique=True),
    Index("ix_threads_owner_subject", "owner_subject"),
)

# Slack: envelope event ids already handled (deduplication across instances), and where each
# approval's card and requester thread live so a decision can update both.
processed_events = table(
    "processed_events",
    [dedup_key("event_id")],
    platform(),
    timestamp("received_at"),
    Index("ix_processed_events_received_at", "received_at"),
)

# One card per approval and platform (migration 0011): an approval shown on Slack and on Teams
# has a row for each, so a decision taken on one can update the other. The requester's
# columns are empty on a platform that only mirrors the card (the requester is elsewhere).
chat_approval_messages = table(
    "chat_approval_messages",
    [ident("approval_id"), platform()],
    ident("team_id"),
    chat_id("card_channel_id"),
    chat_id("card_ts"),
    chat_id("requester_channel_id"),
    chat_id("requester_thread_ts"),
    timestamp("created_at"),
    # The requester's "needs approval" note, updated in place when the decision lands.
    chat_id("requester_note_ts", nullable=True),
    # Teams: the serviceUrl the card was posted through (its update goes there); Slack: NULL.
    Column("service_url", String(512), nullable=True),
)

# Approval notices (migration 0011): what another platform's adapter must show, durable so
# that any instance of that adapter delivers each notice once: ``post`` a card for an approval
# requested elsewhere, or show a ``decided`` one (payload: the ``Decided``, as JSON). Claimed
# with a lease like ``run_jobs``; ``notice_id`` makes publishing idempotent.
approval_notices = table(
    "approval_notices",
    [Column("notice_id", String(191), nullable=False)],
    ident("approval_id"),
    platform(),
    Column("kind", String(16), nullable=False),
    document("payload", nullable=True),
    *lease_columns(),
    timestamp("done_at", nullable=True),
    Index("ix_approval_notices_platform_status", "platform", "status", "created_at"),
)

# Approvals: one row per interrupt. The atomic claim is a conditional UPDATE on `status`.
approvals = table(
    "approvals",
    [ident("approval_id")],
    ident("thread_id"),
    person("requester_subject"),
    document("requester_chat_user", nullable=True),
    document("actions"),
    document("reads"),
    timestamp("created_at"),
    timestamp("expires_at"),
    Column("status", String(16), nullable=False),
    person("decided_by", nullable=True),
    timestamp("decided_at", nullable=True),
    document("decisions"),
    document("outcome"),
    Column("outcome_reason", Text(), nullable=True),
    ident("batch_id", nullable=True),
    Column("batch_index", Integer(), nullable=False, server_default="0"),
    Column("batch_size", Integer(), nullable=False, server_default="1"),
    # The batch's run resumes once (on its first row): claimed, then finished (migration 0009).
    timestamp("resume_claimed_at", nullable=True),
    timestamp("resumed_at", nullable=True),
    Index("ix_approvals_batch_id", "batch_id"),
    Index("ix_approvals_status_expires_at", "status", "expires_at"),
    Index("ix_approvals_requester_subject", "requester_subject"),
    Index("ix_approvals_thread_id", "thread_id"),
)

# The audit log: append-only (the migration installs triggers refusing UPDATE and DELETE).
audit_events = table(
    "audit_events",
    [Column("seq", Integer(), autoincrement=True, nullable=False)],
    Column("event_id", String(64), nullable=False, unique=True),
    timestamp("at"),
    Column("kind", String(32), nullable=False),
    person("requester", nullable=True),
    ident("thread_id", nullable=True),
    Column("tool", String(255), nullable=True),
    document("args_summary", nullable=True),
    Column("outcome", String(64), nullable=True),
    Column("latency_ms", Float(), nullable=True),
    Column("model_used", String(255), nullable=True),
    ident("approval_id", nullable=True),
    person("approver", nullable=True),
    Column("decision", String(16), nullable=True),
    document("edited_args_summary", nullable=True),
    dedup_key("idempotency_key", nullable=True),
    document("detail", nullable=True),
    Index("ix_audit_events_requester_at", "requester", "at"),
    Index("ix_audit_events_thread_id_at", "thread_id", "at"),
    Index("ix_audit_events_at", "at"),
    Index("ix_audit_events_idempotency_key", "idempotency_key"),
)

# Identity (migration 0002): chat user → IdP subject, with the refresh token encrypted (Fernet).
account_links = table(
    "account_links",
    chat_user_columns(),
    person("subject"),
    Column("email", String(320), nullable=False),
    sealed("refresh_token_encrypted"),
    timestamp("created_at"),
    timestamp("updated_at"),
    # Set when the IdP refused the link's refresh at a click; cleared by a new link (0009).
    timestamp("broken_at", nullable=True),
    Index("ix_account_links_subject", "subject"),
)

# Logins started from chat and not yet completed: single use (deleted on callback).
link_logins = table(
    "link_logins",
    [ident("nonce")],
    *chat_user_columns(),
    sealed("code_verifier_encrypted"),
    timestamp("expires_at"),
    Index("ix_link_logins_expires_at", "expires_at"),
)

# Durable runs (migration 0005): every accepted chat message is a job any instance may run.
# A running job holds a lease its worker renews; an expired lease (the worker crashed) makes
# the job claimable again, so a run interrupted by a crash is finished by another worker.
run_jobs = table(
    "run_jobs",
    [dedup_key("job_id")],
    Column("kind", String(64), nullable=False),
    Column("user_key", String(255), nullable=False),
    document("payload"),
    *lease_columns(),
    timestamp("finished_at", nullable=True),
    Column("error", String(500), nullable=True),
    Index("ix_run_jobs_status_created", "status", "created_at"),
)

# MCP servers in ``oauth`` mode (migration 0008): each user's grant per server, sealed with
# Fernet by McpOAuthService before it reaches this table (the database never sees a token).
mcp_oauth_tokens = table(
    "mcp_oauth_tokens",
    [person("subject"), Column("server", String(255), nullable=False)],
    sealed("grant_encrypted"),
    timestamp("updated_at"),
)

# Teams conversation references (migration 0010): where to post proactively for a thread
# (the Connector's serviceUrl and the full conversation id), keyed like ``threads`` by the
# thread's ``PlatformRef`` (tenant, channel key, reply chain). No secrets: these are the
# addresses Teams sent with the user's own message.
teams_conversations = table(
    "teams_conversations",
    [ident("tenant_id"), ident("channel_key"), ident("thread_key")],
    Column("conversation_id", String(512), nullable=False),
    Column("conversation_type", String(32), nullable=False),
    Column("service_url", String(512), nullable=False),
    document("reference"),
    timestamp("updated_at"),
)

# Agent runs (migration 0012): one row per run of a message, so Stop reaches a run on any
# instance. The run reads its own row before each model step and tool call; ``state`` is
# ``running``, ``stopped`` (someone pressed Stop: nothing more starts) or ``done``.
agent_runs = table(
    "agent_runs",
    [ident("run_id")],
    ident("thread_id"),
    Column("state", String(16), nullable=False),
    timestamp("started_at"),
    timestamp("stopped_at", nullable=True),
    person("stopped_by", nullable=True),
    Index("ix_agent_runs_thread_id_state", "thread_id", "state"),
)
