"""Tables and column groups as more than one migration creates them.

Applied migrations call these, so what a helper returns is part of those migrations: never
change one in place (the schema of every database migrated with it would differ from a new
one's); a table that needs other columns gets a new helper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import SchemaItem


def create_table(name: str, key: Sequence[sa.Column[Any]], *items: SchemaItem) -> None:
    """Create table ``name``: its primary key's columns (``key``) first, then its other columns
    and constraints (``items``). The key is named as ``schema.py``'s naming convention names it
    (``pk_<table>``), so that a migrated database and ``metadata.create_all`` agree."""
    key_names = [column.name for column in key]
    op.create_table(name, *key, *items, sa.PrimaryKeyConstraint(*key_names, name=f"pk_{name}"))


def lease_columns() -> list[sa.Column[Any]]:
    """A durable work queue's row state (``run_jobs``, ``approval_notices``): its status, how
    often it was tried, which worker holds it and until when, and when it was queued."""
    return [
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    ]


# Column kinds as the migrations create them (``schema.py`` has the live ones); none of these
# is a key by itself: ``create_table`` makes the key of the columns it is given as one.
def ident(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    """An opaque id from opsbot or a chat platform: a thread, approval, run, team, user."""
    return sa.Column(name, sa.String(64), nullable=nullable)


def person(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    """Who: an identity provider subject, or who decided or stopped something."""
    return sa.Column(name, sa.String(255), nullable=nullable)


def dedup_key(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    """A key that makes something happen once: a platform's event id, a job id, a write's
    idempotency key."""
    return sa.Column(name, sa.String(128), nullable=nullable)


def timestamp(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    """A moment, with its time zone."""
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def document(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    """A JSON value."""
    return sa.Column(name, sa.JSON(), nullable=nullable)


def sealed(name: str) -> sa.Column[Any]:
    """A secret encrypted before it reaches the table."""
    return sa.Column(name, sa.String(), nullable=False)


def platform() -> sa.Column[Any]:
    """Which chat platform a row belongs to."""
    return sa.Column("platform", sa.String(32), nullable=False)


def chat_user_columns() -> list[sa.Column[Any]]:
    """A chat user: platform, workspace or tenant, and the user's id there."""
    return [platform(), ident("team_id"), ident("user_id")]
