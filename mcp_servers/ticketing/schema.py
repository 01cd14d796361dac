"""The ticketing server's tables (its own metadata, separate from opsbot's)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import sqlalchemy as sa

metadata = sa.MetaData()

projects = sa.Table(
    "projects",
    metadata,
    sa.Column("key", sa.String(16), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("team", sa.String(64), nullable=False),
)
tickets = sa.Table(
    "tickets",
    metadata,
    sa.Column("key", sa.String(32), primary_key=True),
    sa.Column("project", sa.ForeignKey("projects.key"), nullable=False),
    sa.Column("number", sa.Integer, nullable=False),
    sa.Column("title", sa.String(300), nullable=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("priority", sa.String(16), nullable=False),
    sa.Column("assignee", sa.String(128)),
    sa.Column("created_by", sa.String(128), nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
    sa.Column("updated_at", sa.String(40), nullable=False),
)
comments = sa.Table(
    "comments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("ticket_key", sa.ForeignKey("tickets.key"), nullable=False),
    sa.Column("author", sa.String(128), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
)
idempotency = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("subject", sa.String(128), primary_key=True),
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("tool", sa.String(64), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("result", sa.Text, nullable=False),
    sa.Column("created_at", sa.String(40), nullable=False),
)
change_log = sa.Table(
    "change_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.String(40), nullable=False),
    sa.Column("subject", sa.String(128), nullable=False),
    sa.Column("actor", sa.String(128)),
    sa.Column("tool", sa.String(64), nullable=False),
    sa.Column("ticket_key", sa.String(32)),
    sa.Column("idempotency_key", sa.String(200)),
    sa.Column("change", sa.Text, nullable=False),
)

APPEND_ONLY_POSTGRES = [
    "CREATE OR REPLACE FUNCTION change_log_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'change_log is append-only'; END $$",
    "CREATE OR REPLACE TRIGGER change_log_append_only BEFORE UPDATE OR DELETE ON change_log "
    "FOR EACH ROW EXECUTE FUNCTION change_log_append_only()",
    "CREATE OR REPLACE TRIGGER change_log_no_truncate BEFORE TRUNCATE ON change_log "
    "FOR EACH STATEMENT EXECUTE FUNCTION change_log_append_only()",
]

APPEND_ONLY = [
    "CREATE TRIGGER IF NOT EXISTS change_log_no_update BEFORE UPDATE ON change_log "
    "BEGIN SELECT RAISE(ABORT, 'change_log is append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS change_log_no_delete BEFORE DELETE ON change_log "
    "BEGIN SELECT RAISE(ABORT, 'change_log is append-only'); END",
]


def fingerprint(tool: str, args: dict[str, Any]) -> str:
    canonical = json.dumps({"tool": tool, "args": args}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
