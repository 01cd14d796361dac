"""Shared SQL state of the Teams adapter: processed deliveries and conversation references.

Deliveries are claimed in ``processed_events``, the same table as Slack's ``event_id``s
(platform "teams"), so a redelivery that reaches any instance is recognised. Conversation
references are kept per thread (``teams_conversations``) so any instance can answer, post a
decision's result in the requester's thread, or reach a chat proactively.

Example::

    if await SqlProcessedActivities(engine).claim(message.delivery_id):
        await SqlConversations(engine).save(message.conversation)
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.teams.core import PlatformRef
from bot.teams.incoming import PLATFORM, Conversation
from infra.clock import Clock, utc_now
from infra.storage.schema import processed_events, teams_conversations
from infra.storage.store import SqlStore

_SQLITE_WRITERS: weakref.WeakKeyDictionary[AsyncEngine, asyncio.Lock] = weakref.WeakKeyDictionary()


def write_lock(engine: AsyncEngine) -> contextlib.AbstractAsyncContextManager[Any]:
    """SQLite has a single writer: this process's Teams writes queue here instead of in
    SQLite's busy-wait backoff (multi-second tails under bursts). PostgreSQL: no lock."""
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    lock = _SQLITE_WRITERS.get(engine)
    if lock is None:
        lock = _SQLITE_WRITERS[engine] = asyncio.Lock()
    return lock


class SqlProcessedActivities:
    """Deduplication on the primary key of ``processed_events``: the insert is the claim."""

    def __init__(self, engine: AsyncEngine, clock: Clock = utc_now) -> None:
        self._engine = engine
        self._clock = clock
        self._write_lock = write_lock(engine)

    async def claim(self, delivery_id: str, conversation: Conversation | None = None) -> bool:
        """``True`` the first time ``delivery_id`` is seen, on any instance. With
        ``conversation``, its reference is saved in the same transaction (one write per
        delivery: SQLite's single writer made separate ones queue up under bursts)."""
        try:
            async with self._write_lock, self._engine.begin() as conn:
                await conn.execute(
                    processed_events.insert().values(
                        event_id=delivery_id, platform=PLATFORM, received_at=self._clock()
                    )
                )
                if conversation is not None:
                    await save_conversation(conn, conversation, self._clock())
        except IntegrityError:
            return False
        return True

    async def prune(self, older_than: timedelta) -> int:
        cutoff = self._clock() - older_than
        async with self._write_lock, self._engine.begin() as conn:
            result = await conn.execute(
                delete(processed_events).where(
                    processed_events.c.received_at < cutoff,
                    processed_events.c.platform == PLATFORM,
                )
            )
        return int(result.rowcount or 0)


async def save_conversation(
    conn: AsyncConnection, conversation: Conversation, now: datetime
) -> None:
    """Insert or refresh one thread's conversation reference, inside ``conn``'s transaction."""
    ref = conversation.ref
    values = {
        "conversation_id": conversation.conversation_id,
        "conversation_type": conversation.conversation_type,
        "service_url": conversation.service_url,
        "reference": conversation.reference,
        "updated_at": now,
    }
    c = teams_conversations.c
    changed = await conn.execute(
        update(teams_conversations)
        .where(
            c.tenant_id == ref.team_id,
            c.channel_key == ref.channel_id,
            c.thread_key == ref.thread_ts,
        )
        .values(**values)
    )
    if changed.rowcount:
        return
    # Two first messages of one thread at once: the other's insert wins, which is the same
    # reference.
    with contextlib.suppress(IntegrityError):
        async with conn.begin_nested():
            await conn.execute(
                teams_conversations.insert().values(
                    tenant_id=ref.team_id,
                    channel_key=ref.channel_id,
                    thread_key=ref.thread_ts,
                    **values,
                )
            )


class SqlConversations(SqlStore):
    async def save(self, conversation: Conversation) -> None:
        """Insert or refresh (Teams may move a conversation to another ``serviceUrl``)."""
        async with write_lock(self._engine), self._engine.begin() as conn:
            await save_conversation(conn, conversation, self._clock())

    async def get(self, ref: PlatformRef) -> Conversation | None:
        if ref.platform != PLATFORM:
            return None
        c = teams_conversations.c
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(teams_conversations).where(
                        c.tenant_id == ref.team_id,
                        c.channel_key == ref.channel_id,
                        c.thread_key == ref.thread_ts,
                    )
                )
            ).first()
        if row is None:
            return None
        m = row._mapping
        return Conversation(
            ref=ref,
            conversation_id=m["conversation_id"],
            conversation_type=m["conversation_type"],
            service_url=m["service_url"],
            reference=dict(m["reference"]),
        )
