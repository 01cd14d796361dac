"""SQLite connections go back to the pool without a rollback after a commit (one trip to
aiosqlite's thread less per use), and one left inside a transaction is still rolled back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.storage import create_engine


@pytest.fixture
def rollbacks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from sqlalchemy.dialects.sqlite.aiosqlite import AsyncAdapt_aiosqlite_connection as Adapted

    seen: list[str] = []
    rollback = Adapted.rollback

    def counted(self: Any) -> None:
        seen.append("rollback")
        rollback(self)

    monkeypatch.setattr(Adapted, "rollback", counted)
    return seen


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A SQLite file with one table ``t``."""
    engine = create_engine(f"sqlite:///{tmp_path}/reset.db")
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
        yield engine
    finally:
        await engine.dispose()


async def test_a_committed_connection_returns_without_a_rollback(
    engine: AsyncEngine, rollbacks: list[str]
) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO t VALUES (1)"))
    assert rollbacks == []


def _write_past_sqlalchemy(sync: Connection) -> bool:
    """An INSERT on the driver's connection, past SQLAlchemy's own transaction: only the
    pool's reset can end it. True if the driver is then inside a transaction."""
    raw = sync.connection.dbapi_connection
    assert raw is not None
    raw.cursor().execute("INSERT INTO t VALUES (1)")
    return bool(raw._connection._connection.in_transaction)


async def test_a_connection_left_in_a_transaction_is_rolled_back_on_return(
    engine: AsyncEngine, rollbacks: list[str]
) -> None:
    async with engine.connect() as conn:
        assert await conn.run_sync(_write_past_sqlalchemy)
    assert rollbacks  # ended by a rollback, not left open (nor committed: see below)
    async with engine.begin() as conn:  # the write lock was released: this can write
        await conn.execute(text("INSERT INTO t VALUES (2)"))
        rows = (await conn.execute(text("SELECT x FROM t"))).scalars().all()
    assert rows == [2]
