"""Migrations: idempotent, and in step with the schema on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.storage import async_url, current_revision, metadata, migrate
from infra.storage.migrate import alembic_config


async def test_migrate_is_idempotent(engine: AsyncEngine) -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert await current_revision(engine) == head
    await migrate(engine)
    await migrate(engine)
    assert await current_revision(engine) == head


# Tables other libraries create in the same database (LangGraph's checkpointer and store,
# the job queue); they manage their own migrations.
FOREIGN_TABLE_PREFIXES = ("checkpoint", "store")


def _ours(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    table = obj if type_ == "table" else getattr(obj, "table", None)
    table_name = name if type_ == "table" else getattr(table, "name", "")
    return not (
        reflected and compare_to is None and str(table_name).startswith(FOREIGN_TABLE_PREFIXES)
    )


async def test_migrations_match_the_schema(engine: AsyncEngine) -> None:
    def _diff(connection: Connection) -> list[Any]:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "include_object": _ours}
        )
        return list(compare_metadata(context, metadata))

    async with engine.connect() as connection:
        diff = await connection.run_sync(_diff)
    assert diff == []


def test_database_url_schemes() -> None:
    assert async_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert async_url("sqlite:///x/opsbot.db") == "sqlite+aiosqlite:///x/opsbot.db"
    with pytest.raises(ValueError, match="unsupported"):
        async_url("mysql://u@h/db")
