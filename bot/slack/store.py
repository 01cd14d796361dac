"""Shared SQL state for the Slack adapter: processed event ids and approval message refs.

Both live in the project's database so any instance can serve any delivery or click:
a retried event that lands on another instance is still recognised as a duplicate.

Example::

    events = SqlProcessedEvents(engine)
    if await events.claim("Ev123"):   # True only for the first delivery, on any instance
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.clock import Clock, utc_now
from infra.storage.card_rows import card_row, save_first_card
from infra.storage.schema import processed_events
from infra.storage.store import SqlStore

PLATFORM = "slack"


class ProcessedEvents(Protocol):
    async def claim(self, event_id: str) -> bool:
        """Record ``event_id``; ``True`` the first time, ``False`` for every later delivery."""
        ...


class SqlProcessedEvents:
    """Deduplication on the primary key: the insert is the atomic claim."""

    def __init__(self, engine: AsyncEngine, clock: Clock = utc_now) -> None:
        self._engine = engine
        self._clock = clock
        # SQLite has a single writer: queueing this process's claims here avoids SQLite's
        # busy-wait backoff, which gave multi-second ack tails under bursts (bench slack_ack).
        # Other processes still meet at the primary key.
        self._write_lock: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if engine.dialect.name == "sqlite" else contextlib.nullcontext()
        )

    async def claim(self, event_id: str) -> bool:
        try:
            async with self._write_lock, self._engine.begin() as conn:
                await conn.execute(
                    processed_events.insert().values(
                        event_id=event_id, platform=PLATFORM, received_at=self._clock()
                    )
                )
        except IntegrityError:
            return False
        return True

    async def prune(self, older_than: timedelta) -> int:
        """Forget ids older than Slack's retry window; returns how many were removed."""
        cutoff = self._clock() - older_than
        async with self._engine.begin() as conn:
            result = await conn.execute(
                delete(processed_events).where(processed_events.c.received_at < cutoff)
            )
        return int(result.rowcount or 0)


@dataclass(frozen=True, slots=True)
class ApprovalMessages:
    """Where an approval's card is, and the requester's thread to tell of the decision."""

    approval_id: str
    team_id: str
    card_channel_id: str
    card_ts: str
    requester_channel_id: str
    requester_thread_ts: str
    created_at: datetime
    requester_note_ts: str | None = None
    service_url: str | None = None  # Teams: where the card's updates go


# Each field is the ``chat_approval_messages`` column of the same name.
_MESSAGE_FIELDS = tuple(field.name for field in dataclasses.fields(ApprovalMessages))


class SqlApprovalMessages(SqlStore):
    """Card locations of one platform (one row per approval and platform: an approval shown
    on Slack and on Teams has a row for each)."""

    def __init__(
        self, engine: AsyncEngine, clock: Clock = utc_now, *, platform: str = PLATFORM
    ) -> None:
        super().__init__(engine, clock)
        self._platform = platform

    async def save(
        self,
        approval_id: str,
        team_id: str,
        card: tuple[str, str],
        requester: tuple[str, str],
        note_ts: str | None = None,
        *,
        service_url: str | None = None,
    ) -> bool:
        """Remember the card (channel, ts), the requester thread (channel, thread_ts; empty
        for a card mirrored from another platform) and the "needs approval" note in it; the
        first save wins (``False``: one was saved before), so a retried post never points the
        approval at a second card."""
        return await save_first_card(
            self._engine,
            approval_id=approval_id,
            platform=self._platform,
            team_id=team_id,
            card_channel_id=card[0],
            card_ts=card[1],
            requester_channel_id=requester[0],
            requester_thread_ts=requester[1],
            requester_note_ts=note_ts,
            service_url=service_url,
            created_at=self._clock(),
        )

    async def get(self, approval_id: str) -> ApprovalMessages | None:
        m = await card_row(self._engine, approval_id, self._platform)
        if m is None:
            return None
        return ApprovalMessages(**{name: m[name] for name in _MESSAGE_FIELDS})
