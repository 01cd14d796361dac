"""Threads: a platform conversation mapped to a random ``thread_id`` with a recorded owner.

A ``thread_id`` is an identifier, never an authorisation: every load, continue or resume
checks the owner (invariant 3).

Example::

    store = SqlThreadStore(engine)
    thread = await store.get_or_create(PlatformRef("slack", "T1", "C1", "1712.1"), "alice")
    await store.require_owner(thread.thread_id, "alice")   # raises NotThreadOwnerError otherwise
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import Insert, RowMapping, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.clock import Clock, IdFactory, random_id, utc_now
from infra.storage.schema import threads as threads_table
from infra.storage.store import SqlStore


class ThreadError(Exception):
    """Base class for thread errors."""


class ThreadNotFoundError(ThreadError):
    """No thread has this id."""


class NotThreadOwnerError(ThreadError):
    """The caller does not own the thread; nothing of it is loaded."""


@dataclass(frozen=True, slots=True)
class PlatformRef:
    """Where a conversation lives on its chat platform."""

    platform: str
    team_id: str
    channel_id: str
    thread_ts: str


@dataclass(frozen=True, slots=True)
class Thread:
    thread_id: str
    owner_subject: str
    ref: PlatformRef
    created_at: datetime


class ThreadStore(Protocol):
    async def get_or_create(self, ref: PlatformRef, owner_subject: str) -> Thread:
        """The thread at ``ref``; created with ``owner_subject`` as owner if there is none.

        An existing thread keeps its original owner, whoever asks.
        """
        ...

    async def get(self, thread_id: str) -> Thread | None: ...

    async def find(self, ref: PlatformRef) -> Thread | None:
        """The thread at ``ref`` if there is one (never creates it)."""
        ...

    async def require_owner(self, thread_id: str, subject: str) -> Thread:
        """The thread if ``subject`` owns it; raises ``NotThreadOwnerError`` otherwise.

        An unknown id raises ``ThreadNotFoundError``.
        """
        ...

    def take_new(self, thread_id: str) -> bool:
        """Whether this store created ``thread_id`` and nobody took that news yet (once).

        A thread this store just created (a fresh random id) has no checkpoint: its first
        run has no interrupted turn to look for. Only the first caller is told.
        """
        ...


def _check_owner(thread: Thread | None, thread_id: str, subject: str) -> Thread:
    if thread is None:
        raise ThreadNotFoundError(f"no thread {thread_id!r}")
    if thread.owner_subject != subject:
        raise NotThreadOwnerError("this conversation belongs to another user")
    return thread


# Threads remembered per store (created here, or read once), and new threads not yet run.
KNOWN_THREADS = 4096


class NewThreads:
    """Ids of threads a store created that no run took yet, the oldest dropped past
    ``limit`` (a dropped one only costs its first run one checkpoint read)."""

    def __init__(self, limit: int = KNOWN_THREADS) -> None:
        self._limit = limit
        self._ids: dict[str, bool] = {}

    def add(self, thread_id: str) -> None:
        if len(self._ids) >= self._limit:
            del self._ids[next(iter(self._ids))]
        self._ids[thread_id] = True

    def take(self, thread_id: str) -> bool:
        return self._ids.pop(thread_id, False)


class MemoryThreadStore:
    """In-process store for unit tests and single-process development."""

    def __init__(self, clock: Clock = utc_now, new_id: IdFactory = random_id) -> None:
        self._clock = clock
        self._new_id = new_id
        self._by_id: dict[str, Thread] = {}
        self._by_ref: dict[PlatformRef, str] = {}
        self._lock = asyncio.Lock()
        self._new = NewThreads()

    async def get_or_create(self, ref: PlatformRef, owner_subject: str) -> Thread:
        async with self._lock:
            existing = self._by_ref.get(ref)
            if existing is not None:
                return self._by_id[existing]
            thread = Thread(self._new_id(), owner_subject, ref, self._clock())
            self._by_id[thread.thread_id] = thread
            self._by_ref[ref] = thread.thread_id
            self._new.add(thread.thread_id)
            return thread

    async def get(self, thread_id: str) -> Thread | None:
        return self._by_id.get(thread_id)

    async def find(self, ref: PlatformRef) -> Thread | None:
        found = self._by_ref.get(ref)
        return None if found is None else self._by_id[found]

    async def require_owner(self, thread_id: str, subject: str) -> Thread:
        return _check_owner(await self.get(thread_id), thread_id, subject)

    def take_new(self, thread_id: str) -> bool:
        return self._new.take(thread_id)


# The unique index ``uq_threads_platform_ref``: one thread per platform conversation.
_REF_COLUMNS = ["platform", "team_id", "channel_id", "thread_ts"]


class SqlThreadStore(SqlStore):
    """Threads in the project's database (SQLite or PostgreSQL); safe across instances."""

    def __init__(
        self, engine: AsyncEngine, clock: Clock = utc_now, new_id: IdFactory = random_id
    ) -> None:
        super().__init__(engine, clock, new_id)
        # A thread row is never updated or deleted (its owner is fixed at creation), so a
        # row read once answers every later owner check without a query.
        self._known: dict[str, Thread] = {}
        self._new = NewThreads()

    def _remember(self, thread: Thread) -> Thread:
        if len(self._known) >= KNOWN_THREADS:
            del self._known[next(iter(self._known))]  # the oldest first
        self._known[thread.thread_id] = thread
        return thread

    async def get_or_create(self, ref: PlatformRef, owner_subject: str) -> Thread:
        thread = Thread(self._new_id(), owner_subject, ref, self._clock())
        # One statement for a new conversation (no read before the write); a conflict on
        # the platform reference means the thread exists (or another instance just made
        # it): that one wins, read back with its original owner. The row goes as
        # parameters beside a statement built once: ``.values(...)`` per call rebuilt it
        # and made SQLAlchemy derive its cache key again on every new conversation.
        row = {
            "thread_id": thread.thread_id,
            "owner_subject": owner_subject,
            "platform": ref.platform,
            "team_id": ref.team_id,
            "channel_id": ref.channel_id,
            "thread_ts": ref.thread_ts,
            "created_at": thread.created_at,
        }
        async with self._engine.begin() as conn:
            created = (await conn.execute(_insert_new(conn.dialect.name), row)).first() is not None
        if created:
            self._new.add(thread.thread_id)
            return self._remember(thread)
        found = await self._get_by_ref(ref)
        if found is None:  # pruned between the two statements: nothing to continue
            raise ThreadNotFoundError(f"the thread at {ref} was just removed")
        return found

    async def get(self, thread_id: str) -> Thread | None:
        known = self._known.get(thread_id)
        if known is not None:
            return known
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(threads_table).where(threads_table.c.thread_id == thread_id)
                )
            ).first()
        return None if row is None else self._remember(_row_to_thread(row._mapping))

    async def require_owner(self, thread_id: str, subject: str) -> Thread:
        return _check_owner(await self.get(thread_id), thread_id, subject)

    def take_new(self, thread_id: str) -> bool:
        return self._new.take(thread_id)

    async def find(self, ref: PlatformRef) -> Thread | None:
        return await self._get_by_ref(ref)

    async def _get_by_ref(self, ref: PlatformRef) -> Thread | None:
        c = threads_table.c
        query = select(threads_table).where(
            c.platform == ref.platform,
            c.team_id == ref.team_id,
            c.channel_id == ref.channel_id,
            c.thread_ts == ref.thread_ts,
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else self._remember(_row_to_thread(row._mapping))


@functools.cache
def _insert_new(dialect: str) -> Insert:
    """INSERT of a new thread that does nothing on a taken platform reference, returning
    the id when it inserted (asyncpg reports no row count); built once per dialect."""
    insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
    return (
        insert(threads_table)
        .on_conflict_do_nothing(index_elements=_REF_COLUMNS)
        .returning(threads_table.c.thread_id)
    )


def _row_to_thread(m: RowMapping) -> Thread:
    return Thread(
        thread_id=m["thread_id"],
        owner_subject=m["owner_subject"],
        ref=PlatformRef(m["platform"], m["team_id"], m["channel_id"], m["thread_ts"]),
        created_at=m["created_at"],
    )
