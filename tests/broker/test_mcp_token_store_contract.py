"""The McpTokenStore contract (sealed MCP OAuth grants per user·server), on memory, SQLite
and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select

from broker.mcp_tokens import McpTokenStore, MemoryMcpTokenStore, SqlMcpTokenStore
from infra.storage import create_engine
from infra.storage.schema import mcp_oauth_tokens

BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[McpTokenStore]:
    if request.param == "memory":
        yield MemoryMcpTokenStore()
        return
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    engine = create_engine(url)
    try:
        yield SqlMcpTokenStore(engine)
    finally:
        await engine.dispose()


async def test_put_get_per_user_and_server(store: McpTokenStore) -> None:
    assert await store.get("alice", "tickets") is None
    await store.put("alice", "tickets", "sealed-a-t")
    await store.put("alice", "wiki", "sealed-a-w")
    await store.put("bob", "tickets", "sealed-b-t")
    assert await store.get("alice", "tickets") == "sealed-a-t"
    assert await store.get("alice", "wiki") == "sealed-a-w"
    assert await store.get("bob", "tickets") == "sealed-b-t"
    assert await store.get("bob", "wiki") is None
    assert await store.servers("alice") == ["tickets", "wiki"]
    assert await store.servers("bob") == ["tickets"]
    assert await store.servers("carol") == []


async def test_put_replaces_the_grant(store: McpTokenStore) -> None:
    await store.put("alice", "tickets", "old")
    await store.put("alice", "tickets", "new")  # after a refresh
    assert await store.get("alice", "tickets") == "new"
    assert await store.servers("alice") == ["tickets"]


async def test_delete_forgets_only_that_grant(store: McpTokenStore) -> None:
    await store.put("alice", "tickets", "a-t")
    await store.put("alice", "wiki", "a-w")
    await store.put("bob", "tickets", "b-t")
    await store.delete("alice", "tickets")
    await store.delete("alice", "nothing-there")  # no error
    assert await store.get("alice", "tickets") is None
    assert await store.servers("alice") == ["wiki"]
    assert await store.get("bob", "tickets") == "b-t"


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_sql_rows_hold_what_was_put(backend: str, request: pytest.FixtureRequest) -> None:
    """One row per user·server in ``mcp_oauth_tokens`` (migration 0008), deleted on delete."""
    engine = create_engine(request.getfixturevalue(f"{backend}_url"))
    try:
        store = SqlMcpTokenStore(engine)
        await store.put("alice", "tickets", "sealed")
        async with engine.connect() as conn:
            rows = (await conn.execute(select(mcp_oauth_tokens))).mappings().all()
        assert [(r["subject"], r["server"], r["grant_encrypted"]) for r in rows] == [
            ("alice", "tickets", "sealed")
        ]
        await store.delete("alice", "tickets")
        async with engine.connect() as conn:
            assert (await conn.execute(select(mcp_oauth_tokens))).all() == []
    finally:
        await engine.dispose()
