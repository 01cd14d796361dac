"""The LangGraph checkpointer for a database URL.

``AsyncPostgresSaver`` for PostgreSQL (on its own pool from ``infra.storage.postgres``: it
cannot share SQLAlchemy's; its ``setup()`` runs under the set-up advisory lock, so instances
started at once do not race; ``opsbot migrate`` runs it too),
``AsyncSqliteSaver`` for SQLite (the embedded default), ``InMemorySaver`` for ``memory://``.

Example::

    async with open_checkpointer(settings.resolved_database_url) as saver:
        agent = create_agent(model, tools, checkpointer=saver)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiosqlite
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from agent_core.answer import FinalAnswer, Source
from infra.storage.engine import SQLITE_BUSY_TIMEOUT_MS, sqlite_file
from infra.storage.postgres import open_set_up

MEMORY_URL = "memory://"
# opsbot's own types that checkpoints hold (the structured answer in the agent's state).
# Registered, they load without LangGraph's "unregistered type" warning; anything else not
# on LangGraph's safe list, or the graph's state schema, is refused when a checkpoint loads.
CHECKPOINT_TYPES: tuple[type, ...] = (FinalAnswer, Source)


def checkpoint_serializer() -> JsonPlusSerializer:
    """The serializer every checkpointer of opsbot uses (see ``CHECKPOINT_TYPES``)."""
    return JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINT_TYPES)


@asynccontextmanager
async def open_checkpointer(
    url: str, *, pool_size: int = 10
) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Open (and set up, once) the checkpointer for ``url``; closes it on exit."""
    if url == MEMORY_URL:
        yield InMemorySaver(serde=checkpoint_serializer())
        return
    if url.startswith("postgresql"):
        async with open_set_up(
            url,
            lambda pool: AsyncPostgresSaver(pool, serde=checkpoint_serializer()),
            max_size=pool_size,
            name="checkpointer",
        ) as saver:
            yield saver
        return
    path = sqlite_file(url, "a checkpointer")
    async with aiosqlite.connect(str(path)) as conn:
        # The same file as opsbot's tables: WAL so readers never block, and a busy timeout
        # so a write waits for the other writer (audit, approvals) instead of failing.
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        saver_sqlite = AsyncSqliteSaver(conn, serde=checkpoint_serializer())
        await saver_sqlite.setup()
        yield saver_sqlite
