"""On SQLite, the ack path writes to a file of its own (the *spool*, ``<database>.inbox``);
the job runner moves what it holds into ``run_jobs``.

Why: SQLite has one writer per file, and agent runs (checkpoints, audit, approvals, the
runner's own claims) write to the database all the time. An ack that had to take that
file's write lock waited for them (p99 862 ms with 50 agent turns running). The spool is
written only by the ack front's single writer (and briefly by the mover), so an ack waits
for its own batch's commit and nothing else.

Durability: an ack is answered once its batch is committed to the spool (WAL; written to
the file at commit, fsynced at checkpoints: ``_no_fsync_per_commit``), so an acked message
survives a crash of the process; the runner moves spooled jobs at start and
before each claim. A move inserts into ``run_jobs`` (ignoring a job id already there) and
then deletes from the spool, so a crash between the two repeats the move harmlessly.

Dedup: the spool keeps each delivery id (``processed_events``) for ``DEDUP_WINDOW`` after the
job has moved on, so a redelivery is recognised at the ack; the ids are copied to the
database's ``processed_events`` too (the store Slack's and Teams' other paths read).

Example::

    engine = await open_spool(spool_url(database_url))   # on the ack loop: JobInbox(engine)
    mover = SpoolMover(main_engine)                        # on the runner's loop
    moved = await mover.move(kinds={"slack_message"})
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy
from sqlalchemy import Engine, delete, event, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random

from infra.clock import Clock, utc_now
from infra.jobs.inbox import JobInbox
from infra.retries import retried
from infra.storage.engine import create_engine, single_writer, sqlite_path
from infra.storage.schema import metadata, processed_events, run_jobs

SUFFIX = ".inbox"
# Slack retries within minutes and Teams re-sends within seconds: an hour covers both.
DEDUP_WINDOW = timedelta(hours=1)
# Jobs moved per transaction: a burst moves in one or two, and no move holds the database's
# write lock for long.
MOVE_BATCH = 256


def spool_path(database_url: str) -> Path | None:
    """The spool file beside a SQLite database file; ``None`` for PostgreSQL or memory."""
    path = sqlite_path(database_url)
    return None if path is None else path.with_name(path.name + SUFFIX)


def spool_url(database_url: str) -> str | None:
    path = spool_path(database_url)
    return None if path is None else f"sqlite:///{path}"


def _no_fsync_per_commit(dbapi_connection: Any, _record: Any) -> None:
    # WAL with synchronous=NORMAL: a commit is written to the WAL file before it returns
    # (so an acked delivery is stored: it survives the process crashing, being killed or
    # OOM-killed, and the next open reads it), but not fsynced; only checkpoints fsync.
    # What it gives up: the last commits before a power loss or kernel crash, which the
    # platform cannot tell from a lost ack either. With FULL, every batch waited for an
    # fsync of its own, and a lone ack waited for the disk (4-8 ms here, more on a busy
    # disk) while holding the spool's write lock.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


async def open_spool(url: str) -> AsyncEngine:
    """An engine on the spool file, its two tables created if missing (the spool is this
    module's own file, not the migrated database)."""
    engine = create_engine(url)
    event.listen(engine.sync_engine, "connect", _no_fsync_per_commit)

    def racing(exc: BaseException) -> bool:
        # The ack front and the job runner open the spool at the same time: create_all checks,
        # then creates, so the other's CREATE can land in between ("already exists"), or hold
        # the file's lock ("locked"). Another pass finds the tables and creates nothing.
        text = str(exc)
        return isinstance(exc, OperationalError) and ("already exists" in text or "locked" in text)

    async def create() -> None:
        async with engine.begin() as conn:
            await conn.run_sync(
                lambda sync: metadata.create_all(sync, tables=[run_jobs, processed_events])
            )

    try:
        retrying = AsyncRetrying(
            retry=retry_if_exception(racing),
            stop=stop_after_attempt(5),
            wait=wait_random(0.01, 0.1),
            reraise=True,
        )
        await retried(retrying, create)
    except BaseException:
        await engine.dispose()
        raise
    return engine


def spool_writer(url: str) -> Engine:
    """The ack front's own connection to the spool, used on its loop (``JobInbox``'s
    ``writer``): a batch's commit without fsync (``_no_fsync_per_commit``) is a few tens of
    microseconds of SQLite, with the GIL released; through aiosqlite the same batch was six
    round trips to its thread, each waiting again for the GIL and for the ack loop to wake
    while agents computed. Busy timeout 0, as the inbox's retry loop expects. WAL
    checkpoints (every 1000 pages) may run in a commit here: rare, and the GIL is free."""
    engine = sqlalchemy.create_engine(url, pool_size=1, max_overflow=0)
    event.listen(engine, "connect", _writer_pragmas)
    return engine


def _writer_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=0")
    cursor.close()
    _no_fsync_per_commit(dbapi_connection, _record)


async def open_ack_engine(database_url: str, pool_size: int = 2) -> AsyncEngine:
    """The engine an ack front's ``JobInbox`` writes with: the spool on SQLite, else a small
    pool of its own (named ``ack``) on PostgreSQL."""
    url = spool_url(database_url)
    if url is not None:
        return await open_spool(url)
    # No ping, not even after idling: it was one more round trip per batch, each waiting for
    # the GIL again on a busy process, and a lone ack after a quiet spell is the one that
    # must be quick. A connection that died in the pool (a database restart) fails its
    # batch's one statement instead, and the batch is sent again once (``inbox_pg``).
    # Autocommit from the connect on: the inbox's one statement is atomic by itself, and
    # setting it per checkout (and back at check-in) was CPU on the ack thread every batch.
    return create_engine(
        database_url,
        pool_size=max(1, pool_size),
        max_overflow=0,
        pool_name="ack",
        ping_after_idle=None,
        isolation_level="AUTOCOMMIT",
    )


@contextlib.asynccontextmanager
async def open_ack_inbox(
    database_url: str, pool_size: int = 2, clock: Clock = utc_now
) -> AsyncIterator[JobInbox]:
    """An ack front's ``JobInbox`` on its own engine (``open_ack_engine``), open on the
    running loop until the block exits."""
    engine = await open_ack_engine(database_url, pool_size)
    url = spool_url(database_url)
    writer = None if url is None else spool_writer(url)
    try:
        async with JobInbox(engine, clock, writers=max(1, pool_size), writer=writer) as inbox:
            yield inbox
    finally:
        if writer is not None:
            writer.dispose()
        await engine.dispose()


class SpoolMover:
    """Moves spooled jobs of a SQLite database into its ``run_jobs``. Opens the spool on the
    first move that finds the file (the loop it runs on owns the engine); ``close`` it."""

    def __init__(self, main: AsyncEngine, clock: Clock = utc_now) -> None:
        self._main = main
        self._clock = clock
        url = main.url.render_as_string(hide_password=False)
        self._path = spool_path(url.replace("+aiosqlite", ""))
        self._spool: AsyncEngine | None = None
        self._pruned_at: datetime | None = None
        self.moved = 0

    async def move(self, kinds: Collection[str] | None = None) -> int:
        """Move every spooled job (of ``kinds``, or all) into ``run_jobs``; how many."""
        if self._path is None or not self._path.exists():
            return 0
        if self._spool is None:
            self._spool = await open_spool(f"sqlite:///{self._path}")
        total = 0
        while True:
            moved = await self._move_batch(self._spool, kinds)
            total += moved
            if moved < MOVE_BATCH:
                break
        await self._prune(self._spool)
        self.moved += total
        return total

    async def _move_batch(self, spool: AsyncEngine, kinds: Collection[str] | None) -> int:
        query = select(run_jobs).order_by(run_jobs.c.created_at).limit(MOVE_BATCH)
        if kinds is not None:
            query = query.where(run_jobs.c.kind.in_(list(kinds)))
        async with spool.connect() as conn:
            jobs = [dict(row) for row in (await conn.execute(query)).mappings()]
            if not jobs:
                return 0
            since = min(job["created_at"] for job in jobs)
            seen = [
                dict(row)
                for row in (
                    await conn.execute(
                        select(processed_events).where(processed_events.c.received_at >= since)
                    )
                ).mappings()
            ]
        async with single_writer(self._main), self._main.begin() as conn:
            await conn.execute(
                sqlite.insert(run_jobs)
                .values(jobs)
                .on_conflict_do_nothing(index_elements=["job_id"])
            )
            if seen:
                await conn.execute(
                    sqlite.insert(processed_events)
                    .values(seen)
                    .on_conflict_do_nothing(index_elements=["event_id"])
                )
        # Only once they are in run_jobs: a crash before this line moves them again.
        async with spool.begin() as conn:
            await conn.execute(
                delete(run_jobs).where(run_jobs.c.job_id.in_([job["job_id"] for job in jobs]))
            )
        return len(jobs)

    async def _prune(self, spool: AsyncEngine) -> None:
        now = self._clock()
        if self._pruned_at is not None and now - self._pruned_at < DEDUP_WINDOW / 60:
            return
        self._pruned_at = now
        async with spool.begin() as conn:
            await conn.execute(
                delete(processed_events).where(processed_events.c.received_at < now - DEDUP_WINDOW)
            )

    async def close(self) -> None:
        if self._spool is not None:
            await self._spool.dispose()
            self._spool = None
