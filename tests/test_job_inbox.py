"""The ack path's inbox: deliveries stored as queued jobs in batches, redeliveries recognised,
on SQLite and PostgreSQL; on SQLite it waits out another writer instead of failing."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.jobs import Delivery, JobInbox, JobStatus, SqlJobQueue
from infra.storage import create_engine
from infra.storage.schema import processed_events

BOUND = 30.0


def delivery(n: int) -> Delivery:
    return Delivery(
        f"slack-Ev{n}", "slack_message", f"slack:T1:U{n}", {"text": f"q{n}"}, event_id=f"Ev{n}"
    )


async def test_a_batch_stores_each_delivery_once_and_marks_its_event_processed(
    database_url: str, engine: AsyncEngine
) -> None:
    inbox_engine = create_engine(database_url, pool_name="ack", pool_size=1, max_overflow=0)
    try:
        async with JobInbox(inbox_engine, writers=1) as inbox:
            # Queued before the writer runs: one transaction for all, the retry of Ev2 in it.
            puts = [inbox.put(delivery(1)), inbox.put(delivery(2)), inbox.put(delivery(2))]
            firsts = await asyncio.wait_for(asyncio.gather(*puts), BOUND)
            assert firsts == [True, True, False]
            assert inbox.batches == 1
            # A redelivery later, as Slack's retry would come: recognised.
            assert await asyncio.wait_for(inbox.put(delivery(1)), BOUND) is False
    finally:
        await inbox_engine.dispose()

    queue = SqlJobQueue(engine)
    for n in (1, 2):
        assert await queue.status(f"slack-Ev{n}") == (JobStatus.QUEUED, 0)
    async with engine.connect() as conn:
        seen = (await conn.execute(select(processed_events.c.event_id))).scalars().all()
    assert sorted(seen) == ["Ev1", "Ev2"]


async def test_the_inbox_refuses_to_be_used_unopened(sqlite_url: str) -> None:
    inbox_engine = create_engine(sqlite_url)
    try:
        with pytest.raises(RuntimeError, match="not open"):
            await JobInbox(inbox_engine).put(delivery(1))
    finally:
        await inbox_engine.dispose()


async def test_on_sqlite_a_write_waits_for_another_writer_then_lands(sqlite_url: str) -> None:
    """Another connection holds the file's write lock: the inbox keeps trying (busy timeout
    0 and its own short retries), and stores the delivery once the lock is released."""
    other = create_engine(sqlite_url)
    inbox_engine = create_engine(sqlite_url)
    try:
        async with other.connect() as holder, JobInbox(inbox_engine) as inbox:
            await holder.execute(text("BEGIN IMMEDIATE"))  # the write lock, held
            put = asyncio.create_task(inbox.put(delivery(7)))
            # Let the writer try (and be refused) a number of times while the lock is held.
            for _ in range(20):
                await asyncio.sleep(0)
            await asyncio.sleep(0.05)
            assert not put.done()
            await holder.execute(text("ROLLBACK"))
            assert await asyncio.wait_for(put, BOUND) is True
    finally:
        await other.dispose()
        await inbox_engine.dispose()
    check = create_engine(sqlite_url)
    try:
        assert await SqlJobQueue(check).status("slack-Ev7") == (JobStatus.QUEUED, 0)
    finally:
        await check.dispose()
