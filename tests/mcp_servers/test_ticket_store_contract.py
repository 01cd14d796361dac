"""The ticket store on SQLite and PostgreSQL: idempotency holds across server instances.

Two ``TicketStore`` objects on one database stand for two server processes (each has its own
lock, so only the database's constraints keep them apart).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import make_url

from infra.settings import Settings
from mcp_servers import Caller, IdempotencyConflictError
from mcp_servers.ticketing import TicketStore, seed_data

ALICE = Caller("alice", "opsbot", None, frozenset(), frozenset({"team-payments"}))


@pytest.fixture(scope="module")
def ticket_pg_url(base_settings: Settings) -> Iterator[str]:
    admin = base_settings.test_database_url
    name = f"opsbot_tickets_{secrets.token_hex(5)}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield (
            make_url(admin)
            .set(drivername="postgresql+psycopg", database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[TicketStore, TicketStore]]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'tickets.db'}"
    else:
        url = request.getfixturevalue("ticket_pg_url")
    first = await TicketStore.open(url)
    async with first.engine.begin() as conn:  # a fresh slate per test on the shared database
        for table in ("comments", "idempotency_keys", "tickets", "projects"):
            await conn.execute(sa.text(f"DELETE FROM {table}"))
        if first.engine.dialect.name == "postgresql":
            await conn.execute(sa.text("ALTER TABLE change_log DISABLE TRIGGER USER"))
            await conn.execute(sa.text("DELETE FROM change_log"))
            await conn.execute(sa.text("ALTER TABLE change_log ENABLE TRIGGER USER"))
    await first.seed(seed_data())
    second = await TicketStore.open(url)
    yield first, second
    await first.close()
    await second.close()


NEW = {
    "project": "PAY",
    "title": "Duplicate charge reported",
    "description": "A customer reports two charges for ORD-10042.",
    "priority": "high",
    "assignee": None,
}


async def _create(store: TicketStore, key: str, **overrides: object) -> str:
    args = {**NEW, **overrides}
    ticket = await store.create(ALICE, idempotency_key=key, **args)  # type: ignore[arg-type]
    return ticket.key


async def test_one_key_across_instances_creates_one_ticket(
    two_stores: tuple[TicketStore, TicketStore],
) -> None:
    first, second = two_stores
    stores = [first, second] * 4
    try:
        keys = await asyncio.gather(*(_create(s, "approval-42:call-1") for s in stores))
    except sa.exc.OperationalError as exc:  # SQLite: a writer found the file locked
        pytest.fail(f"concurrent writers failed instead of deduplicating: {exc}")
    assert len(set(keys)) == 1
    changes = await first.all_changes()
    assert [c.idempotency_key for c in changes] == ["approval-42:call-1"]


async def test_distinct_keys_across_instances_all_succeed(
    two_stores: tuple[TicketStore, TicketStore],
) -> None:
    first, second = two_stores
    keys = await asyncio.gather(
        *(_create([first, second][i % 2], f"distinct-key-{i:03}") for i in range(6))
    )
    assert len(set(keys)) == 6
    assert len(await second.all_changes()) == 6


async def test_conflicting_reuse_is_refused_by_the_other_instance(
    two_stores: tuple[TicketStore, TicketStore],
) -> None:
    first, second = two_stores
    await _create(first, "reuse-across-1")
    with pytest.raises(IdempotencyConflictError):
        await _create(second, "reuse-across-1", title="Another title")


async def test_change_log_is_append_only(two_stores: tuple[TicketStore, TicketStore]) -> None:
    first, _ = two_stores
    await _create(first, "append-only-01")
    for statement in ("UPDATE change_log SET subject = 'x'", "DELETE FROM change_log"):
        with pytest.raises(sa.exc.DBAPIError, match="append-only"):
            async with first.engine.begin() as conn:
                await conn.execute(sa.text(statement))
    assert len(await first.all_changes()) == 1


async def test_a_comments_result_is_the_ticket_as_stored_after_it(
    two_stores: tuple[TicketStore, TicketStore],
) -> None:
    # add_comment builds its answer from its first read plus the new comment (no second
    # read under the write lock): it must still equal what the store holds afterwards, and
    # a repeat with the same key must answer the same.
    first, _ = two_stores
    before = await first.get(ALICE, "PAY-101")
    result = await first.add_comment(ALICE, "PAY-101", "Looking into it.", "comment-key-0001")
    stored = await first.get(ALICE, "PAY-101")
    assert result == stored
    assert len(result.comments) == len(before.comments) + 1
    assert result.comments[-1].body == "Looking into it."
    assert result.comments[-1].author == "alice"
    assert result.updated_at != before.updated_at
    again = await first.add_comment(ALICE, "PAY-101", "Looking into it.", "comment-key-0001")
    assert again == stored
