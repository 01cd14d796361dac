"""The ack path's writer: a delivery becomes a queued job (and its id a processed event) on
connections nothing else holds, a batch of deliveries per transaction.

Why its own engine: the ack must not wait for a connection an agent run holds (the agent's
pool, the checkpointer's, the job runner's) nor, on SQLite, queue behind their writes in this
process. Why batches: with 50 requests in flight, one commit for all that are waiting costs
one fsync instead of 50; a lone request still commits at once (nothing waits to fill a batch).

On SQLite there is one writer task (SQLite has one writer per file; WAL lets readers go on),
on the spool's own pysqlite connection when given one (``writer``: no thread hops, see
``infra.jobs.spool.spool_writer``); on PostgreSQL ``writers`` tasks share the engine's small
pool.

Example::

    inbox = JobInbox(create_engine(url, pool_size=2, max_overflow=0), writers=2)
    async with inbox:
        first = await inbox.put(Delivery("slack-Ev1", "slack_message", "slack:T:U", {...},
                                         event_id="Ev1", platform="slack"))
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.clock import Clock, utc_now
from infra.jobs.inbox_pg import PgStore
from infra.jobs.queue import JobSpec, JobStatus
from infra.lifecycle import Background
from infra.storage.engine import SQLITE_BUSY_TIMEOUT_MS
from infra.storage.faults import is_connection_error
from infra.storage.schema import processed_events, run_jobs

# Enough to take a whole burst in one commit, small enough that one transaction stays short.
MAX_BATCH = 64
# How long a SQLite writer tries to get the file's write lock before it gives up (the
# engine's own busy timeout).
SQLITE_LOCK_WAIT = SQLITE_BUSY_TIMEOUT_MS / 1000


def _no_busy_wait(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=0")
    cursor.close()


@dataclass(frozen=True, slots=True)
class Delivery(JobSpec):
    """One accepted request: the job to run and, for an event, the delivery id to remember."""

    event_id: str | None = None
    platform: str = "slack"


_Waiting = tuple[Delivery, asyncio.Future[bool]]


class JobInbox(Background):
    """``put`` stores a delivery as a queued job; ``True`` the first time, ``False`` for a
    redelivery (the job id exists). A database error reaches every caller of the batch."""

    def __init__(
        self,
        engine: AsyncEngine,
        clock: Clock = utc_now,
        *,
        writers: int = 1,
        max_batch: int = MAX_BATCH,
        writer: Engine | None = None,
    ) -> None:
        self.engine = engine
        self._writer = writer
        self._clock = clock
        self._sqlite = engine.dialect.name == "sqlite"
        insert = sqlite.insert if self._sqlite else postgresql.insert
        # Built once and run with a list of rows ("insertmanyvalues": one multi-row INSERT
        # per batch), so SQLAlchemy compiles each once per engine. A ``.values([...])``
        # statement was compiled again for every batch: most of a batch's CPU.
        self._claim = (
            insert(processed_events)
            .on_conflict_do_nothing(index_elements=["event_id"])
            .returning(processed_events.c.event_id)
        )
        self._queue = (
            insert(run_jobs)
            .on_conflict_do_nothing(index_elements=["job_id"])
            .returning(run_jobs.c.job_id)
        )
        self._writers = 1 if self._sqlite else max(1, writers)
        self._pg = None if self._sqlite else PgStore(engine)
        if self._sqlite:
            event.listen(engine.sync_engine, "connect", _no_busy_wait)
        self._max_batch = max_batch
        self._waiting: asyncio.Queue[_Waiting] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self.batches = 0  # transactions committed (a test reads it)

    async def put(self, delivery: Delivery) -> bool:
        if not self._tasks:
            raise RuntimeError("JobInbox is not open: use it as `async with inbox:`")
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.put_nowait((delivery, done))
        return await done

    async def _write_forever(self) -> None:
        while True:
            batch = [await self._waiting.get()]
            while len(batch) < self._max_batch and not self._waiting.empty():
                batch.append(self._waiting.get_nowait())
            live = [(d, f) for d, f in batch if not f.cancelled()]
            try:
                results = await self._write([d for d, _ in live])
            except asyncio.CancelledError:
                for _, done in live:
                    if not done.done():
                        done.cancel()
                raise
            except Exception as exc:
                if len(live) > 1 and not is_connection_error(exc):
                    # One bad delivery must not fail the others: write each on its own.
                    for delivery, done in live:
                        await self._settle(done, self._write([delivery]))
                    continue
                for _, done in live:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for (_, done), first in zip(live, results, strict=True):
                if not done.done():
                    done.set_result(first)

    @staticmethod
    async def _settle(done: asyncio.Future[bool], write: Awaitable[list[bool]]) -> None:
        try:
            [first] = await write
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)
            return
        if not done.done():
            done.set_result(first)

    async def _write(self, deliveries: Sequence[Delivery]) -> list[bool]:
        """One transaction whatever the batch size: two statements on SQLite, one on
        PostgreSQL (``inbox_pg``): each round trip to the database waits for the GIL again
        on a busy process."""
        if self._sqlite:
            firsts = await self._on_sqlite(deliveries)
        else:
            firsts = await self._attempt(deliveries)
        self.batches += 1
        return firsts

    async def _on_sqlite(self, deliveries: Sequence[Delivery]) -> list[bool]:
        # This engine's busy timeout is 0: while another connection writes, SQLite says
        # "locked" at once and the writer tries again a millisecond later. (SQLite's own
        # busy handler sleeps up to 100 ms between tries, and with agents writing all the
        # time an ack waited seconds for its turn.)
        deadline = asyncio.get_running_loop().time() + SQLITE_LOCK_WAIT
        while True:
            try:
                return await self._attempt(deliveries)
            except OperationalError as exc:
                locked = "locked" in str(exc.orig) or "busy" in str(exc.orig)
                if not locked or asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.001)

    async def _attempt(self, deliveries: Sequence[Delivery]) -> list[bool]:
        """The batch in one transaction: on the ``writer``'s connection, on this loop, when
        there is one; on PostgreSQL one statement; else on the engine."""
        if self._writer is not None:
            with self._writer.begin() as conn:
                return self._store_here(conn, deliveries)
        if self._pg is not None:
            new = await self._pg.store(deliveries, self._clock())
            return _firsts(deliveries, new)
        async with self.engine.begin() as conn:
            return await conn.run_sync(self._store_here, deliveries)

    def _store_here(self, conn: Connection, deliveries: Sequence[Delivery]) -> list[bool]:
        """The delivery ids first: a delivery whose id was seen before (its job may have
        moved on, from the SQLite spool, or finished) is a redelivery and stores no job.
        Sync, for the ``writer``'s own connection on this loop; the engine's path runs it
        with ``run_sync``."""
        now = self._clock()
        fresh: set[str] = set()
        if claims := _claim_rows(deliveries, now):
            fresh = {str(e) for (e,) in conn.execute(self._claim, claims).all()}
        new: set[str] = set()
        if jobs := _job_rows(deliveries, fresh, now):
            new = {str(j) for (j,) in conn.execute(self._queue, jobs).all()}
        return _firsts(deliveries, new)

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._write_forever()) for _ in range(self._writers)]

    async def _stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while not self._waiting.empty():
            _, done = self._waiting.get_nowait()
            if not done.done():
                done.cancel()
        if self._pg is not None:
            await self._pg.close()  # its connections back to the pool, before a dispose


def _claim_rows(deliveries: Sequence[Delivery], now: datetime) -> list[dict[str, Any]]:
    """``processed_events`` rows for the batch's delivery ids (each once)."""
    events: dict[str, str] = {}
    for d in deliveries:
        if d.event_id:
            events.setdefault(d.event_id, d.platform)
    return [{"event_id": e, "platform": p, "received_at": now} for e, p in events.items()]


def _job_rows(
    deliveries: Sequence[Delivery], fresh: set[str], now: datetime
) -> list[dict[str, Any]]:
    """``run_jobs`` rows for the deliveries whose id was claimed just now (or that have
    none); a redelivery in the same batch is the second: not first."""
    jobs: dict[str, Delivery] = {}
    for d in deliveries:
        if not d.event_id or d.event_id in fresh:
            jobs.setdefault(d.job_id, d)
    return [
        {
            "job_id": d.job_id,
            "kind": d.kind,
            "user_key": d.user_key,
            "payload": dict(d.payload),
            "status": JobStatus.QUEUED.value,
            "attempts": 0,
            "created_at": now,
        }
        for d in jobs.values()
    ]


def _firsts(deliveries: Sequence[Delivery], new: set[str]) -> list[bool]:
    """Each delivery's answer: ``True`` for the first of the jobs stored now."""
    firsts = []
    for d in deliveries:
        firsts.append(d.job_id in new)
        new.discard(d.job_id)
    return firsts
