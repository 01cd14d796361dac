"""The Teams adapter's shared SQL state on SQLite and PostgreSQL: deliveries claimed once in
Slack's ``processed_events`` table, conversation references kept and refreshed per thread."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.teams.core import PlatformRef
from bot.teams.incoming import CHAT_THREAD, Conversation, delivery_id, short_key, thread_ref
from bot.teams.store import SqlConversations, SqlProcessedActivities

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def _conversation(ref: PlatformRef, service_url: str) -> Conversation:
    return Conversation(
        ref=ref,
        conversation_id="19:c@thread.tacv2;messageid=1",
        conversation_type="channel",
        service_url=service_url,
        reference={"serviceUrl": service_url, "conversation": {"id": "19:c@thread.tacv2"}},
    )


async def test_a_delivery_is_claimed_once_even_at_the_same_time(engine: AsyncEngine) -> None:
    first = SqlProcessedActivities(engine, clock=lambda: NOW)
    second = SqlProcessedActivities(engine, clock=lambda: NOW)  # another instance
    key = delivery_id("19:c@thread.tacv2;messageid=1", "1")
    results = await asyncio.gather(*(s.claim(key) for s in (first, second, first, second)))
    assert sorted(results) == [False, False, False, True]
    # The same activity id in another conversation is another delivery.
    assert await first.claim(delivery_id("a:other", "1"))


async def test_pruning_forgets_old_teams_deliveries_only(engine: AsyncEngine) -> None:
    clock = [NOW - timedelta(days=2)]
    store = SqlProcessedActivities(engine, clock=lambda: clock[0])
    assert await store.claim("teams:old")
    clock[0] = NOW
    assert await store.claim("teams:new")
    assert await store.prune(timedelta(hours=24)) == 1
    assert await store.claim("teams:old")  # forgotten, so new again
    assert not await store.claim("teams:new")


async def test_conversation_reference_is_kept_and_refreshed(engine: AsyncEngine) -> None:
    store = SqlConversations(engine, clock=lambda: NOW)
    ref = thread_ref("tenant-1", "19:c@thread.tacv2;messageid=1", "channel")
    assert await store.get(ref) is None
    await store.save(_conversation(ref, "https://smba.one/"))
    await store.save(_conversation(ref, "https://smba.two/"))  # Teams moved it
    kept = await store.get(ref)
    assert kept is not None
    assert kept.service_url == "https://smba.two/"
    assert kept.reference["serviceUrl"] == "https://smba.two/"
    # Slack's refs are never Teams conversations.
    assert await store.get(PlatformRef("slack", "tenant-1", ref.channel_id, ref.thread_ts)) is None


async def test_two_first_messages_of_one_thread_at_once(engine: AsyncEngine) -> None:
    store = SqlConversations(engine, clock=lambda: NOW)
    ref = thread_ref("tenant-1", "19:c@thread.tacv2;messageid=7", "channel")
    await asyncio.gather(*(store.save(_conversation(ref, "https://smba.one/")) for _ in range(4)))
    assert await store.get(ref) is not None


def test_thread_keys_fit_the_threads_table() -> None:
    personal = "a:1" + "z" * 120
    ref = thread_ref("tenant-1", personal, "personal")
    assert ref.channel_id == short_key(personal)
    assert len(ref.channel_id) <= 64
    assert ref.thread_ts == CHAT_THREAD
    assert short_key("19:short@thread.tacv2") == "19:short@thread.tacv2"
    assert short_key(personal) != short_key(personal + "x")
    channel = thread_ref("tenant-1", "19:c@thread.tacv2;messageid=1700000000001", "channel")
    assert (channel.channel_id, channel.thread_ts) == ("19:c@thread.tacv2", "1700000000001")
