"""The tables opsbot owns, defined once for SQLite and PostgreSQL.

Each table arrives with an Alembic migration in ``opsbot/storage/migrations/versions``;
``tests/test_migrations.py`` fails when the migrations and this schema disagree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Column, DateTime, Dialect, Index, MetaData, String, Table
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

threads = Table(
    "threads",
    metadata,
    Column("thread_id", String(64), primary_key=True),
    Column("owner_subject", String(255), nullable=False),
    Column("platform", String(32), nullable=False),
    Column("team_id", String(64), nullable=False),
    Column("channel_id", String(64), nullable=False),
    Column("thread_ts", String(64), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    Index(
        "uq_threads_platform_ref",
        "platform",
        "team_id",
        "channel_id",
        "thread_ts",
        unique=True,
    ),
    Index("ix_threads_owner_subject", "owner_subject"),
)
