"""The one PostgreSQL connection pool helper, and the lock that serialises schema set-up.

Every psycopg pool in the app comes from ``open_pool``: the checkpointer's, the user-memory
store's, the database MCP server's. (SQLAlchemy engines get their checkout ping, after an idle
second, from ``create_engine``.) A pooled connection is checked on checkout; after a database
restart the first dead one found makes the whole pool be swept at once, and the pool
reconnects in the background, so the requests after a restart get live connections instead
of errors.

Example::

    async with open_pool(url, max_size=4, dict_rows=True, prepare_threshold=0) as pool:
        async with setup_lock(url):       # three instances starting at once: one at a time
            await AsyncPostgresStore(pool).setup()

    # the same, for any LangGraph saver or store:
    async with open_set_up(url, AsyncPostgresStore, max_size=4, name="user-memory") as store:
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from infra.storage.engine import application_name, sync_url

log = logging.getLogger(__name__)

# A pool waits this long for a connection before raising ``PoolTimeout`` (a connection error
# for the job runner, which then retries the job): shorter than psycopg_pool's 30 s, so a run
# during an outage gives up and goes back in the queue instead of holding its lease.
CHECKOUT_TIMEOUT = 10.0


class _SweepingCheck:
    """Pool ``check``: a dead connection on checkout makes the whole pool be swept at once
    (psycopg_pool otherwise finds them one by one with exponential back-off: ~15 s after a
    database restart for a default pool)."""

    def __init__(self) -> None:
        self.pool: AsyncConnectionPool[Any] | None = None
        self._sweeps: set[asyncio.Task[None]] = set()

    async def __call__(self, conn: AsyncConnection[Any]) -> None:
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            if self.pool is not None and not self._sweeps:
                task = asyncio.create_task(self.pool.check())
                self._sweeps.add(task)
                task.add_done_callback(self._sweeps.discard)
            raise


@contextlib.asynccontextmanager
async def open_pool(
    url: str,
    *,
    max_size: int = 10,
    dict_rows: bool = False,
    prepare_threshold: int | None = 5,
    name: str | None = None,
    checkout_timeout: float = CHECKOUT_TIMEOUT,
    wait: bool = False,
) -> AsyncIterator[AsyncConnectionPool[Any]]:
    """An open psycopg pool on ``url`` (autocommit), checked on checkout and reconnecting
    after a restart; closed on exit.

    ``dict_rows``, ``prepare_threshold=0``: what LangGraph's savers and stores expect.
    ``wait``: fail here if the first connection cannot be made (otherwise the first
    checkout fails)."""
    from psycopg.rows import dict_row

    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": prepare_threshold}
    if name and "application_name" not in url:
        kwargs["application_name"] = application_name(name)
    if dict_rows:
        kwargs["row_factory"] = dict_row
    check = _SweepingCheck()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        conninfo=sync_url(url),
        min_size=min(4, max_size),  # psycopg_pool's default, as these pools had before
        max_size=max_size,
        kwargs=kwargs,
        check=check,
        name=name,
        timeout=checkout_timeout,
        open=False,
    )
    check.pool = pool
    await pool.open(wait=wait, timeout=checkout_timeout)
    try:
        yield pool
    finally:
        await pool.close()


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


SETUP_LOCK = "opsbot:schema-setup"


@contextlib.asynccontextmanager
async def setup_lock(
    url: str, name: str = SETUP_LOCK, *, poll: float = 0.1, wait_seconds: float = 300.0
) -> AsyncIterator[None]:
    """Hold a session-level PostgreSQL advisory lock while the block runs: schema and store
    set-up of several processes started at once then run one after the other.

    Waiters poll ``pg_try_advisory_lock`` rather than block in ``pg_advisory_lock``: a
    blocked statement holds a snapshot, and LangGraph's store set-up runs ``CREATE INDEX
    CONCURRENTLY``, which waits for every older snapshot: the holder would wait for the
    waiters and the waiters for the holder."""
    key = lock_key(name)
    conn = await AsyncConnection.connect(sync_url(url), autocommit=True)
    try:
        async with asyncio.timeout(wait_seconds):
            while True:
                row = await (
                    await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                ).fetchone()
                if row is not None and row[0]:
                    break
                await asyncio.sleep(poll)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # closing the session releases it anyway
                await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    finally:
        await conn.close()


class _SetsUp(Protocol):
    async def setup(self) -> None: ...


_T = TypeVar("_T", bound=_SetsUp)


@contextlib.asynccontextmanager
async def open_set_up(
    url: str, build: Callable[[AsyncConnectionPool[Any]], _T], *, max_size: int, name: str
) -> AsyncIterator[_T]:
    """A LangGraph saver or store built by ``build`` on its own pool (dict rows, no prepared
    statements: what they expect), set up once under ``setup_lock``; the pool closes on exit."""
    async with open_pool(
        url, max_size=max_size, dict_rows=True, prepare_threshold=0, name=name
    ) as pool:
        built = build(pool)
        async with setup_lock(url):
            await built.setup()
        yield built
