"""The ack path's inbox: deliveries stored as queued jobs in batches, redeliveries recognised,
on SQLite and PostgreSQL; on SQLite it waits out another writer instead of failing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.jobs import (
    Delivery,
    Job,
    JobInbox,
    JobRunner,
    JobStatus,
    SqlJobQueue,
    open_ack_engine,
    open_ack_inbox,
    spool_url,
)
from infra.jobs.spool import open_spool
from infra.storage import create_engine
from infra.storage.engine import CHECKED_IN_AT, application_name
from infra.storage.schema import processed_events, run_jobs

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


async def test_on_sqlite_an_acked_delivery_waits_in_the_spool_and_survives_a_restart(
    sqlite_url: str,
) -> None:
    """The ack writes to the spool file, never to the database the agents write to; after
    a crash (nothing moved), the next runner moves it in and runs it once. A redelivery
    after the move is still recognised: one job."""
    url = spool_url(sqlite_url)
    assert url is not None
    holder_engine = create_engine(sqlite_url)
    spool = await open_ack_engine(sqlite_url)
    try:
        async with holder_engine.connect() as holder, JobInbox(spool) as inbox:
            # An agent holds the database's write lock: the ack does not wait for it.
            await holder.execute(text("BEGIN IMMEDIATE"))
            assert await asyncio.wait_for(inbox.put(delivery(8)), BOUND) is True
            await holder.execute(text("ROLLBACK"))
    finally:
        await spool.dispose()  # the process dies here: nothing was moved
        await holder_engine.dispose()

    ran: list[str] = []

    async def handler(job: Job) -> None:
        ran.append(job.job_id)

    engine = create_engine(sqlite_url)
    try:
        queue = SqlJobQueue(engine)
        assert await queue.status("slack-Ev8") is None
        async with JobRunner(queue, handler, poll_seconds=0.05, recover_on_start=True) as runner:
            for _ in range(int(BOUND / 0.05)):
                if ran:
                    break
                await asyncio.sleep(0.05)
            await runner.idle()
        assert ran == ["slack-Ev8"]
        assert await queue.status("slack-Ev8") == (JobStatus.DONE, 1)
        async with engine.connect() as conn:
            seen = (await conn.execute(select(processed_events.c.event_id))).scalars().all()
        assert seen == ["Ev8"]

        spool = await open_ack_engine(sqlite_url)
        try:
            async with JobInbox(spool) as inbox:
                assert await asyncio.wait_for(inbox.put(delivery(8)), BOUND) is False
            async with spool.connect() as conn:
                left = (await conn.execute(select(run_jobs.c.job_id))).scalars().all()
            assert left == []
        finally:
            await spool.dispose()
    finally:
        await engine.dispose()


async def test_the_spool_opened_at_once_by_the_front_and_the_runner_opens_for_both(
    tmp_path: Path,
) -> None:
    """Both create the spool's tables if missing: a CREATE landing between the other's check
    and create was "table run_jobs already exists" (a durable Slack test in CI)."""
    for round_ in range(5):
        url = f"sqlite:///{tmp_path / f'spool{round_}.db.inbox'}"
        engines = await asyncio.gather(*(open_spool(url) for _ in range(6)))
        for engine in engines:
            async with engine.connect() as conn:
                assert (await conn.execute(select(run_jobs))).all() == []
            await engine.dispose()


async def test_the_spool_commits_to_its_wal_without_an_fsync_each(sqlite_url: str) -> None:
    """WAL with synchronous=NORMAL (1): a commit is in the file when the ack is answered
    (another connection reads it), but a lone ack no longer waits for the disk's fsync."""
    spool = await open_ack_engine(sqlite_url)
    try:
        async with spool.connect() as conn:
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
            assert (await conn.execute(text("PRAGMA synchronous"))).scalar() == 1
        async with JobInbox(spool) as inbox:
            assert await asyncio.wait_for(inbox.put(delivery(9)), BOUND) is True
    finally:
        await spool.dispose()
    reader = create_engine(str(spool_url(sqlite_url)))
    try:
        async with reader.connect() as conn:
            left = (await conn.execute(select(run_jobs.c.job_id))).scalars().all()
        assert left == ["slack-Ev9"]
    finally:
        await reader.dispose()


async def test_the_ack_fronts_spool_writer_waits_out_the_mover_and_dedups(sqlite_url: str) -> None:
    """The ack front's inbox writes the spool on its own loop (no aiosqlite thread): while
    the mover holds the spool's write lock it keeps trying without blocking the loop, the
    delivery lands once the lock is released, and a redelivery is recognised."""
    url = spool_url(sqlite_url)
    assert url is not None
    async with open_ack_inbox(sqlite_url) as inbox:
        assert inbox.batches == 0
        mover = create_engine(url)
        try:
            async with mover.connect() as holder:
                await holder.execute(text("BEGIN IMMEDIATE"))  # the spool's write lock, held
                put = asyncio.create_task(inbox.put(delivery(11)))
                ticks = 0
                while ticks < 20:  # the loop keeps running while the writer is refused
                    await asyncio.sleep(0.005)
                    ticks += 1
                assert not put.done()
                await holder.execute(text("ROLLBACK"))
            assert await asyncio.wait_for(put, BOUND) is True
            assert await asyncio.wait_for(inbox.put(delivery(11)), BOUND) is False
            async with mover.connect() as conn:
                left = (await conn.execute(select(run_jobs.c.job_id))).scalars().all()
                seen = (await conn.execute(select(processed_events.c.event_id))).scalars().all()
            assert (left, seen) == (["slack-Ev11"], ["Ev11"])
        finally:
            await mover.dispose()


async def test_a_mixed_batch_keeps_its_dedup_and_is_one_statement_on_postgres(
    database_url: str, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redelivery of an id stored by an earlier batch queues nothing, a delivery without an
    id always queues, a job id twice in a batch is stored once (the first delivery's row);
    on PostgreSQL the batch is a single statement (one round trip, atomic by itself)."""
    inbox_engine = create_engine(database_url, pool_name="ack", pool_size=1, max_overflow=0)
    # Counted at the driver: the PostgreSQL inbox hands its statement to psycopg itself, past
    # SQLAlchemy's events, and statements sent through SQLAlchemy reach psycopg here too.
    sent: list[object] = []
    execute = psycopg.AsyncCursor.execute

    async def counted(self: psycopg.AsyncCursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(query)
        return await execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted)
    plain = Delivery("cli-1", "cli_message", "cli:U9", {"text": "first", "n": [1, 2]})
    twin = Delivery("cli-1", "cli_message", "cli:U9", {"text": "second"})
    try:
        async with JobInbox(inbox_engine, writers=1) as inbox:
            assert await asyncio.wait_for(inbox.put(delivery(1)), BOUND) is True
            sent.clear()
            puts = [inbox.put(d) for d in (delivery(1), plain, twin, delivery(2))]
            firsts = await asyncio.wait_for(asyncio.gather(*puts), BOUND)
            assert firsts == [False, True, False, True]
            assert inbox.batches == 2
    finally:
        await inbox_engine.dispose()
    if not database_url.startswith("sqlite"):
        assert len(sent) == 1, sent
    async with engine.connect() as conn:
        rows = (await conn.execute(select(run_jobs.c.job_id, run_jobs.c.payload))).all()
    assert sorted(rows) == [
        ("cli-1", {"text": "first", "n": [1, 2]}),
        ("slack-Ev1", {"text": "q1"}),
        ("slack-Ev2", {"text": "q2"}),
    ]
    assert await SqlJobQueue(engine).status("cli-1") == (JobStatus.QUEUED, 0)


async def test_a_nul_or_lone_surrogate_in_one_delivery_fails_no_delivery_of_its_batch(
    database_url: str, engine: AsyncEngine
) -> None:
    """PostgreSQL's text cannot hold U+0000, nor its JSON a lone surrogate: one in a message
    (or a name, or a key) is stored as U+FFFD there, and the other deliveries of its batch
    are stored too; an emoji and a user's literal backslash-u0000 are kept as typed."""
    inbox_engine = create_engine(database_url, pool_name="ack", pool_size=1, max_overflow=0)
    odd = Delivery(
        "teams-1", "teams_message", "teams:T:U1", {"text": "a\x00b", "from": {"n\x00": "\x00"}}
    )
    lone = Delivery("teams-2", "teams_message", "teams:T:U2", {"text": "x\ud800y \U0001f600"})
    literal = Delivery("cli-2", "cli_message", "cli:U9", {"text": "typed \\u0000 \\ud800"})
    try:
        async with JobInbox(inbox_engine, writers=1) as inbox:
            puts = [inbox.put(d) for d in (delivery(1), odd, lone, literal)]
            assert await asyncio.wait_for(asyncio.gather(*puts), BOUND) == [True] * 4
            assert inbox.batches == 1
    finally:
        await inbox_engine.dispose()
    async with engine.connect() as conn:
        rows = dict((await conn.execute(select(run_jobs.c.job_id, run_jobs.c.payload))).all())
    sqlite = database_url.startswith("sqlite")
    nul, surrogate = ("\x00", "\ud800") if sqlite else ("\ufffd", "\ufffd")
    assert rows == {
        "slack-Ev1": {"text": "q1"},
        "teams-1": {"text": f"a{nul}b", "from": {f"n{nul}": nul}},
        "teams-2": {"text": f"x{surrogate}y \U0001f600"},
        "cli-2": {"text": "typed \\u0000 \\ud800"},
    }


async def test_on_postgres_batches_keep_their_connection_checked_out(postgres_url: str) -> None:
    """A writer keeps its connection between batches (a check-out and check-in of the pool
    were ~60 us of the ack thread's CPU per batch) and gives it back when the inbox closes,
    so the engine can be disposed of."""
    ack_engine = await open_ack_engine(postgres_url, 1)
    checkouts: list[object] = []

    def checked_out(*args: object) -> None:
        checkouts.append(args)

    event.listen(ack_engine.sync_engine.pool, "checkout", checked_out)
    pool = ack_engine.sync_engine.pool
    try:
        async with JobInbox(ack_engine, writers=1) as inbox:
            for n in range(5):
                assert await asyncio.wait_for(inbox.put(delivery(n)), BOUND) is True
            assert len(checkouts) == 1
            assert pool.checkedout() == 1  # type: ignore[attr-defined]
        assert pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        await ack_engine.dispose()


async def test_the_ack_engine_on_postgres_sends_no_ping_and_outlives_a_dead_connection(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ping round trip per batch, not even after idling (each waits for the GIL again on a
    busy process, and a lone ack after a quiet spell must be quick); a
    pooled connection the server dropped (a restart) costs its batch one more try, not a
    503: the delivery is stored."""
    ack_engine = await open_ack_engine(postgres_url, 1)
    pings: list[object] = []
    ping = ack_engine.dialect.do_ping
    monkeypatch.setattr(ack_engine.dialect, "do_ping", lambda c: pings.append(c) or ping(c))

    def idle_for_an_hour(_dbapi: object, record: Any) -> None:
        # As if every check-in were long ago: an engine that pings idle connections would.
        record.info[CHECKED_IN_AT] = -3600.0

    event.listen(ack_engine.sync_engine.pool, "checkin", idle_for_an_hour)
    admin = create_engine(postgres_url)
    try:
        async with JobInbox(ack_engine, writers=1) as inbox:
            assert await asyncio.wait_for(inbox.put(delivery(1)), BOUND) is True
            async with admin.connect() as conn:
                killed = await conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = :name"
                    ),
                    {"name": application_name("ack")},
                )
                assert killed.all() == [(True,)]  # the ack pool's one connection
            assert await asyncio.wait_for(inbox.put(delivery(2)), BOUND) is True
            assert await asyncio.wait_for(inbox.put(delivery(2)), BOUND) is False
        assert pings == []
        queue = SqlJobQueue(admin)
        for n in (1, 2):
            assert await queue.status(f"slack-Ev{n}") == (JobStatus.QUEUED, 0)
    finally:
        await ack_engine.dispose()
        await admin.dispose()
