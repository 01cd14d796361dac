"""The engine of a reference server's own store (docs, ticketing), its tables created."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

IN_MEMORY = ("sqlite+aiosqlite://", "sqlite+aiosqlite:///:memory:")


async def open_store_engine(
    url: str, metadata: sa.MetaData, *, then: Mapping[str, Sequence[str]] | None = None
) -> AsyncEngine:
    """An engine on ``url`` with ``metadata``'s tables created, then the statements ``then``
    names for its dialect (triggers), in the same transaction. An in-memory SQLite database
    (the default) is one shared connection: each new connection would be a new, empty one."""
    if url in IN_MEMORY:
        engine = create_async_engine(url, poolclass=StaticPool)
    else:
        engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        for statement in (then or {}).get(engine.dialect.name, []):
            await conn.execute(sa.text(statement))
    return engine
