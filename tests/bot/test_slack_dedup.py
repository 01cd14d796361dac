"""Deduplication on ``event_id`` in the shared database: one answer across instances."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from assistant.types import ApprovalRequested, PlatformRef
from bot.slack import open_bot
from bot.slack.store import SqlApprovalMessages, SqlProcessedEvents
from infra.jobs import spool_url
from infra.storage import create_engine
from testing.fake_assistant import FakeAssistant
from testing.slack import APPROVALS_CHANNEL_ID, FakeSlack, mention
from tests.bot.conftest import ALICE, RunApp, slack_config
from tests.bot.test_slack_db_down import the_retry_is_answered


async def test_claim_is_true_once_even_when_concurrent(engine: AsyncEngine) -> None:
    store = SqlProcessedEvents(engine)
    results = await asyncio.gather(*(store.claim("Ev1") for _ in range(8)))
    assert results.count(True) == 1
    assert await store.claim("Ev2") is True
    assert await store.claim("Ev1") is False


async def test_prune_forgets_only_old_ids(engine: AsyncEngine) -> None:
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    clock = [now - timedelta(hours=2)]
    store = SqlProcessedEvents(engine, clock=lambda: clock[0])
    await store.claim("EvOld")
    clock[0] = now
    await store.claim("EvNew")
    assert await store.prune(timedelta(hours=1)) == 1
    assert await store.claim("EvOld") is True
    assert await store.claim("EvNew") is False


async def test_approval_messages_first_save_wins(engine: AsyncEngine) -> None:
    store = SqlApprovalMessages(engine)
    await store.save("ap1", "T1", ("C1", "1.0"), ("C2", "2.0"))
    await store.save("ap1", "T1", ("C9", "9.0"), ("C9", "9.0"))
    saved = await store.get("ap1")
    assert saved is not None
    assert (saved.card_channel_id, saved.card_ts) == ("C1", "1.0")
    assert (saved.requester_channel_id, saved.requester_thread_ts) == ("C2", "2.0")
    assert saved.created_at.tzinfo is not None
    assert await store.get("nope") is None


@pytest.mark.postgres
async def test_retries_across_two_instances_get_one_answer(
    run_app: RunApp, fake_assistant: FakeAssistant, postgres_url: str
) -> None:
    async with (
        run_app(fake_assistant, database_url=postgres_url) as one,
        run_app(fake_assistant, database_url=postgres_url) as two,
    ):
        event = mention(ALICE.user_id, "which jobs failed?", ts="1700000200.0001")
        replies = await asyncio.gather(
            *(
                sender.post_event(event, event_id="EvSHARED", retry_num=n)
                for n, sender in enumerate([one.sender, two.sender, one.sender, two.sender])
            )
        )
        assert all(r == (200, "") for r in replies)
        await one.fake.wait_for("chat.update")
        await one.fake.settle()
    assert len(fake_assistant.messages) == 1
    assert len(one.fake.calls_to("chat.update")) == 1


async def rename_table(engine: AsyncEngine, old: str, new: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(f"ALTER TABLE {old} RENAME TO {new}"))


async def test_a_database_outage_answers_5xx_and_slacks_retry_is_answered_once(
    run_app: RunApp, fake_assistant: FakeAssistant
) -> None:
    """The first table a delivery writes is unusable: Slack gets a 5xx, not an ack, and its
    retry is answered once the database is back (not dropped as already seen). The ack
    front (durable runs) answers 503 with Retry-After; on SQLite it writes to its spool."""
    async with run_app(fake_assistant) as env:
        table = "processed_events"
        storage = env.engine
        spool = spool_url(str(env.engine.url).replace("+aiosqlite", ""))
        if env.durable and spool is not None:
            storage = create_engine(spool)
        try:
            await rename_table(storage, table, f"{table}_away")
            status, _ = await env.sender.post_event(mention(ALICE.user_id, "hi"), event_id="EvDOWN")
            assert status == (503 if env.durable else 500)
            await rename_table(storage, f"{table}_away", table)
        finally:
            if storage is not env.engine:
                await storage.dispose()
        await the_retry_is_answered(env, "EvDOWN")
    assert len(fake_assistant.messages) == 1
    assert len(env.fake.calls_to("chat.update")) == 1


async def test_a_card_posted_again_for_one_approval_leaves_one_card(
    fake_slack: FakeSlack, fake_assistant: FakeAssistant, sqlite_url: str
) -> None:
    """A run retried after its card was posted (its job taken over under load, a connection
    lost after the post) posts no second card; two attempts at once leave one card."""
    ref = PlatformRef("slack", ALICE.team_id, "C0GENERAL", "1700000000.000100")
    engine = create_engine(sqlite_url)
    try:
        async with open_bot(slack_config(fake_slack), fake_assistant, engine) as bot:
            adapter = bot.adapter
            for _ in range(2):  # the first attempt, then its retry
                retried = await fake_assistant.handle_message(ALICE, ref, "update PAY-1 x=1")
                assert isinstance(retried, ApprovalRequested)
            first = retried.approval.approval_id
            await adapter.post_card(first, ALICE.team_id, "C0GENERAL", ref.thread_ts)
            await adapter.post_card(first, ALICE.team_id, "C0GENERAL", ref.thread_ts)
            assert len(_cards(fake_slack)) == 1

            concurrent = await fake_assistant.handle_message(ALICE, ref, "update PAY-2 x=1")
            assert isinstance(concurrent, ApprovalRequested)
            second = concurrent.approval.approval_id
            await asyncio.gather(
                *(
                    adapter.post_card(second, ALICE.team_id, "C0GENERAL", ref.thread_ts)
                    for _ in range(3)
                )
            )
            assert len(_cards(fake_slack)) == 2
            saved = await SqlApprovalMessages(engine).get(second)
            assert saved is not None
            assert (saved.card_channel_id, saved.card_ts) in fake_slack.messages
    finally:
        await engine.dispose()


def _cards(fake: FakeSlack) -> list[dict[str, Any]]:
    return [m for (channel, _ts), m in fake.messages.items() if channel == APPROVALS_CHANNEL_ID]
