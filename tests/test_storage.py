"""Migrations: idempotent, and in step with the schema on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.storage import async_url, current_revision, metadata, migrate
from infra.storage.engine import create_engine, sqlite_pool
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


async def test_a_sqlite_file_pool_keeps_what_it_opens_and_no_more(tmp_path: Path) -> None:
    """A burst past ``pool_size`` opens connections once: they are kept for the next burst
    (SQLAlchemy closed overflow connections on return, so each burst opened them again),
    and no more than ``pool_size + max_overflow`` are open at once."""
    engine = create_engine(f"sqlite:///{tmp_path}/pool.db", pool_size=2, max_overflow=3)
    opened: list[object] = []
    event.listen(engine.sync_engine, "connect", lambda conn, _record: opened.append(conn))
    release = asyncio.Event()
    full = asyncio.Event()
    at_once = 0
    most = 0

    async def hold() -> None:
        nonlocal at_once, most
        async with engine.connect() as connection:
            await connection.execute(text("select 1"))
            at_once += 1
            most = max(most, at_once)
            if at_once >= 5:  # the sixth and later wait for a connection
                full.set()
            await release.wait()
            at_once -= 1

    try:
        for _burst in range(2):
            release.clear()
            full.clear()
            tasks = [asyncio.create_task(hold()) for _ in range(8)]
            await asyncio.wait_for(full.wait(), 10)
            release.set()
            await asyncio.gather(*tasks)
        assert most == 5
        assert len(opened) == 5, f"{len(opened)} connections opened over two bursts"
    finally:
        await engine.dispose()


def test_sqlite_pool_sizes_default_as_sqlalchemys() -> None:
    assert sqlite_pool(None, None) == {"pool_size": 15, "max_overflow": 0}
    assert sqlite_pool(3, 3) == {"pool_size": 6, "max_overflow": 0}
