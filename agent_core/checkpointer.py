"""The LangGraph checkpointer for a database URL.

``AsyncPostgresSaver`` for PostgreSQL (on its own psycopg pool: it cannot share SQLAlchemy's),
``AsyncSqliteSaver`` for SQLite (the embedded default), ``InMemorySaver`` for ``memory://``.

Example::

    async with open_checkpointer(settings.resolved_database_url) as saver:
        agent = create_agent(model, tools, checkpointer=saver)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiosqlite
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from infra.storage.engine import SQLITE_BUSY_TIMEOUT_MS, sqlite_path, sync_url

MEMORY_URL = "memory://"


class _SweepingCheck:
    """Pool ``check``: a dead connection on checkout makes the whole pool be swept at once
    (psycopg_pool otherwise finds them one by one with exponential back-off: ~15 s after a
    database restart for a default pool)."""

    def __init__(self) -> None:
        self.pool: AsyncConnectionPool[AsyncConnection[DictRow]] | None = None
        self._sweeps: set[asyncio.Task[None]] = set()

    async def __call__(self, conn: AsyncConnection[DictRow]) -> None:
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            if self.pool is not None and not self._sweeps:
                task = asyncio.create_task(self.pool.check())
                self._sweeps.add(task)
                task.add_done_callback(self._sweeps.discard)
            raise


@asynccontextmanager
async def open_checkpointer(
    url: str, *, pool_size: int = 10
) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Open (and set up, once) the checkpointer for ``url``; closes it on exit."""
    if url == MEMORY_URL:
        yield InMemorySaver()
        return
    if url.startswith("postgresql"):
        check = _SweepingCheck()
        pool: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
            conninfo=sync_url(url),
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0},
            # A database restart leaves every pooled connection dead: check on checkout.
            check=check,
            open=False,
        )
        check.pool = pool
        await pool.open()
        try:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            yield saver
        finally:
            await pool.close()
        return
    path = sqlite_path(url)
    if path is None:
        raise ValueError(f"cannot open a checkpointer for {url!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    async with aiosqlite.connect(str(path)) as conn:
        # The same file as opsbot's tables: WAL so readers never block, and a busy timeout
        # so a write waits for the other writer (audit, approvals) instead of failing.
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        saver_sqlite = AsyncSqliteSaver(conn)
        await saver_sqlite.setup()
        yield saver_sqlite
