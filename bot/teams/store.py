"""Shared SQL state of the Teams adapter: processed deliveries and conversation references.

Deliveries are claimed in ``processed_events``, the same table as Slack's ``event_id``s
(platform "teams"), so a redelivery that reaches any instance is recognised. Conversation
references are kept per thread (``teams_conversations``) so any instance can answer, post a
decision's result in the requester's thread, or reach a chat proactively.

Example::

    if await SqlProcessedActivities(engine).claim(message.delivery_id):
        await SqlConversations(engine).save(message.ref, message.conversation_id, ...)
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.teams.core import PlatformRef
from bot.teams.incoming import PLATFORM
from infra.clock import Clock, utc_now
from infra.storage.schema import processed_events, teams_conversations


class SqlProcessedActivities:
    """Deduplication on the primary key of ``processed_events``: the insert is the claim."""

    def __init__(self, engine: AsyncEngine, clock: Clock = utc_now) -> None:
        self._engine = engine
        self._clock = clock
        # SQLite has one writer: queue this process's claims (as Slack's store does).
        self._write_lock: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if engine.dialect.name == "sqlite" else contextlib.nullcontext()
        )

    async def claim(self, delivery_id: str) -> bool:
        """``True`` the first time ``delivery_id`` is seen, on any instance."""
        try:
            async with self._write_lock, self._engine.begin() as conn:
                await conn.execute(
                    processed_events.insert().values(
                        event_id=delivery_id, platform=PLATFORM, received_at=self._clock()
                    )
                )
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


@dataclass(frozen=True, slots=True)
class Conversation:
    """Where a thread lives in Teams: enough to post in it from any instance."""

    ref: PlatformRef
    conversation_id: str
    conversation_type: str
    service_url: str
    reference: dict[str, Any]


class SqlConversations:
    def __init__(self, engine: AsyncEngine, clock: Clock = utc_now) -> None:
        self._engine = engine
        self._clock = clock

    async def save(self, conversation: Conversation) -> None:
        """Insert or refresh (Teams may move a conversation to another ``serviceUrl``)."""
        ref = conversation.ref
        values = {
            "conversation_id": conversation.conversation_id,
            "conversation_type": conversation.conversation_type,
            "service_url": conversation.service_url,
            "reference": conversation.reference,
            "updated_at": self._clock(),
        }
        c = teams_conversations.c
        async with self._engine.begin() as conn:
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
