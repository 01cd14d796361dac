"""The ticket store on SQLite and PostgreSQL: idempotency holds across server instances.

Two ``TicketStore`` objects on one database stand for two server processes (each has its own
lock, so only the database's constraints keep them apart).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import make_url

from infra.settings import Settings
from mcp_servers import Caller, IdempotencyConflictError, NotFoundError
from mcp_servers.ticketing import TicketStore, seed_data

ALICE = Caller("alice", "opsbot", None, frozenset(), frozenset({"team-payments"}))
# Alice after leaving the payments team: same subject (same idempotency keys), no tickets.
ALICE_MOVED = Caller("alice", "opsbot", None, frozenset(), frozenset({"team-search"}))


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


@dataclass
class _Seen:
    statements: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextmanager
def _watch(store: TicketStore) -> Iterator[_Seen]:
    """The SQL statements the store sends, and those the database refused."""
    seen = _Seen()
    engine = store.engine.sync_engine

    def sent(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.statements.append(statement)

    def failed(context: Any) -> None:
        seen.errors.append(str(context.original_exception))

    sa.event.listen(engine, "before_cursor_execute", sent)
    sa.event.listen(engine, "handle_error", failed)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", sent)
        sa.event.remove(engine, "handle_error", failed)


async def test_a_read_and_a_comment_take_few_statements(
    two_stores: tuple[TicketStore, TicketStore],
) -> None:
    # Every approved comment runs these under the store's one write lock: the ticket with its
    # comments is one statement, the write is that read plus claiming the idempotency key,
    # the comment, the ticket's updated_at and the change-log line.
    first, _ = two_stores
    with _watch(first) as seen:
        ticket = await first.get(ALICE, "PAY-101")
    assert len(seen.statements) == 1, seen.statements
    assert ticket.comments
    with _watch(first) as seen:
        result = await first.add_comment(ALICE, "PAY-101", "Counting.", "count-key-0001")
    assert len(seen.statements) == 5, seen.statements
    assert seen.errors == []
    # A repeat answers the stored result without a statement the database refuses (on
    # PostgreSQL a unique violation would be logged as an ERROR by the server every time).
    with _watch(first) as seen:
        again = await first.add_comment(ALICE, "PAY-101", "Counting.", "count-key-0001")
    assert again == result
    assert len(seen.statements) == 1, seen.statements
    assert seen.errors == []
    assert len((await first.get(ALICE, "PAY-101")).comments) == len(result.comments)


async def test_comment_keys_refuse_other_calls_and_survive_lost_access(
    two_stores: tuple[TicketStore, TicketStore],
) -> None:
    # The stored record decides before anything else, as when it was looked up first: a
    # repeat returns the first answer even where the call would now be refused, and a key
    # used for another call is refused even where the call itself would be refused too.
    first, second = two_stores
    result = await first.add_comment(ALICE, "PAY-101", "First.", "comment-rule-0001")
    changes = await first.all_changes()
    assert await second.add_comment(ALICE_MOVED, "PAY-101", "First.", "comment-rule-0001") == (
        result
    )
    for caller, store in ((ALICE, first), (ALICE_MOVED, second)):
        with pytest.raises(IdempotencyConflictError):
            await store.add_comment(caller, "PAY-101", "Other.", "comment-rule-0001")
        with pytest.raises(IdempotencyConflictError):  # on a ticket that does not exist
            await store.add_comment(caller, "PAY-999", "First.", "comment-rule-0001")
        with pytest.raises(IdempotencyConflictError):
            await store.update(caller, "PAY-101", {"title": "x"}, "comment-rule-0001")
    assert await first.all_changes() == changes
    assert await first.get(ALICE, "PAY-101") == result


async def test_a_refused_comment_stays_refused_and_leaves_nothing(
    two_stores: tuple[TicketStore, TicketStore],
) -> None:
    first, _ = two_stores
    before = await first.all_tickets()
    for _ in range(2):  # the repeat is refused the same way: a refusal stores no record
        with pytest.raises(NotFoundError, match="no ticket 'PAY-101' that you can see"):
            await first.add_comment(ALICE_MOVED, "PAY-101", "Sneaky.", "refused-key-0001")
        with pytest.raises(NotFoundError, match="no ticket 'PAY-999' that you can see"):
            await first.add_comment(ALICE, "PAY-999", "Nowhere.", "refused-key-0002")
    assert await first.all_tickets() == before
    assert await first.all_changes() == []
    # The key is still free for a call that is allowed.
    result = await first.add_comment(ALICE, "PAY-101", "Sneaky.", "refused-key-0001")
    assert result.comments[-1].body == "Sneaky."


async def test_one_comment_key_across_instances_comments_once(
    two_stores: tuple[TicketStore, TicketStore],
) -> None:
    first, second = two_stores
    before = await first.get(ALICE, "PAY-102")
    stores = [first, second] * 4
    try:
        results = await asyncio.gather(
            *(s.add_comment(ALICE, "pay-102", "Once.", "approval-7:call-1") for s in stores)
        )
    except sa.exc.OperationalError as exc:  # SQLite: a writer found the file locked
        pytest.fail(f"concurrent writers failed instead of deduplicating: {exc}")
    assert all(r == results[0] for r in results)
    after = await second.get(ALICE, "PAY-102")
    assert after == results[0]
    assert len(after.comments) == len(before.comments) + 1
    assert [c.idempotency_key for c in await first.all_changes()] == ["approval-7:call-1"]
