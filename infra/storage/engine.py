"""Database URLs and async engines for SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def is_postgres(url: str) -> bool:
    return make_url(url).get_backend_name() == "postgresql"


def async_url(url: str) -> str:
    """Map a plain URL to the async driver: ``postgresql://`` → psycopg, ``sqlite://`` → aiosqlite.

    >>> async_url("postgresql://u@h/db")
    'postgresql+psycopg://u@h/db'
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    raise ValueError(
        f"unsupported database URL scheme {parsed.drivername!r}: use sqlite or postgresql"
    )


def sync_url(url: str) -> str:
    """The plain (driverless) form of a URL, as libpq and sqlite3 understand it."""
    parsed = make_url(url)
    return parsed.set(drivername=parsed.get_backend_name()).render_as_string(hide_password=False)


def sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    if (
        parsed.get_backend_name() != "sqlite"
        or not parsed.database
        or parsed.database == ":memory:"
    ):
        return None
    return Path(parsed.database)


def sqlite_file(url: str, what: str) -> Path:
    """The SQLite file of ``url``, its directory created; ``ValueError`` naming ``what`` when
    ``url`` is not a SQLite file URL."""
    path = sqlite_path(url)
    if path is None:
        raise ValueError(f"cannot open {what} for {url!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def application_name(pool: str) -> str:
    """What PostgreSQL shows in ``pg_stat_activity.application_name`` for this process's
    ``pool``: ``opsbot-<pid>-<pool>``, so an operator (and ``bench scale``) can count the
    connections each instance and each of its pools holds."""
    return f"opsbot-{os.getpid()}-{pool}"[:63]


# A pooled PostgreSQL connection back in the pool for longer than this is pinged before use.
PING_AFTER_IDLE_S = 1.0
# Where a pooled connection's record keeps when it was last checked in.
CHECKED_IN_AT = "opsbot_checked_in_at"


def create_engine(
    url: str,
    *,
    pool_name: str = "app",
    ping_after_idle: float | None = PING_AFTER_IDLE_S,
    monotonic: Callable[[], float] = time.monotonic,
    **kwargs: Any,
) -> AsyncEngine:
    """An async engine for ``url``; a SQLite file's directory is created on demand.
    On PostgreSQL its connections are named ``application_name(pool_name)``, and a pooled
    connection idle for more than ``ping_after_idle`` seconds is pinged on checkout
    (``ping_when_idle``; ``None``: never, for a caller that retries a dead connection's
    statement itself); ``pool_size`` and ``max_overflow`` size PostgreSQL's pool, and a
    SQLite file's as ``sqlite_pool`` says (an in-memory database keeps its one connection)."""
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        kwargs.update(sqlite_pool(kwargs.pop("pool_size", None), kwargs.pop("max_overflow", None)))
    elif make_url(url).get_backend_name() == "sqlite":
        kwargs.pop("pool_size", None)
        kwargs.pop("max_overflow", None)
    else:
        if "application_name" not in make_url(url).query:
            connect_args = dict(kwargs.pop("connect_args", {}))
            connect_args.setdefault("application_name", application_name(pool_name))
            kwargs["connect_args"] = connect_args
    sqlite = make_url(url).get_backend_name() == "sqlite"
    if sqlite:
        # Reset on return by ``_sqlite_reset`` (only a connection left in a transaction).
        kwargs.setdefault("pool_reset_on_return", None)
    engine = create_async_engine(async_url(url), **kwargs)
    if sqlite:
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        event.listen(engine.sync_engine, "reset", _sqlite_reset)
    elif ping_after_idle is not None and not kwargs.get("pool_pre_ping"):
        ping_when_idle(engine, ping_after_idle, monotonic)
    return engine


# SQLAlchemy's own sizes for a pool given none.
DEFAULT_POOL_SIZE = 5
DEFAULT_MAX_OVERFLOW = 10


def sqlite_pool(pool_size: int | None, max_overflow: int | None) -> dict[str, Any]:
    """Pool arguments for a SQLite file: as many connections as the sizes allow at once, all
    kept. A SQLite connection costs no server anything, but opening one costs a thread
    (aiosqlite's) and the pragmas; SQLAlchemy's overflow connections were closed on return,
    so every burst past ``pool_size`` (a Slack retry storm, 20 approval clicks) opened and
    closed them again."""
    size = DEFAULT_POOL_SIZE if pool_size is None else pool_size
    overflow = DEFAULT_MAX_OVERFLOW if max_overflow is None else max_overflow
    return {"pool_size": size + overflow, "max_overflow": 0}


def ping_when_idle(
    engine: AsyncEngine, after: float, monotonic: Callable[[], float] = time.monotonic
) -> None:
    """Ping a pooled connection on checkout only when it sat idle for more than ``after``
    seconds; a dead one is replaced, and every connection pooled before it with it.

    After a database restart, pooled connections are dead and the first use of each would
    fail: SQLAlchemy's ``pool_pre_ping`` tests every checkout for that, one more round trip
    per transaction (about half the app-side cost of a one-statement transaction). A
    restart leaves the pool idle for longer than ``after``, so its connections are still
    tested; one used a moment ago — twenty clicks' transactions, back to back — is not.
    A connection killed in between fails its statement, and SQLAlchemy then drops the
    whole pool (``is_disconnect``), as it would after a failed ping."""
    pool = engine.sync_engine.pool
    dialect = engine.sync_engine.dialect

    def checked_in(_dbapi: Any, record: Any) -> None:
        if record is not None:
            record.info[CHECKED_IN_AT] = monotonic()

    def checked_out(dbapi: Any, record: Any, _proxy: Any) -> None:
        # ``info`` is cleared when a connection is replaced: a new one is not pinged.
        idle_since = record.info.get(CHECKED_IN_AT)
        if idle_since is None or monotonic() - idle_since <= after:
            return
        try:
            dialect.do_ping(dbapi)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi, None):
                raise sa_exc.InvalidatePoolError() from exc  # the pool reconnects
            raise

    event.listen(pool, "checkin", checked_in)
    event.listen(pool, "checkout", checked_out)


async def warm_pool(engine: AsyncEngine, size: int) -> int:
    """Open ``size`` pooled connections at once and leave them in the pool (PostgreSQL; a
    no-op for SQLite, whose connections are files): how many were opened.

    A pool opens connections only on demand, so the first burst after a start paid for
    them: twenty approval clicks at once opened ~16 PostgreSQL connections on their way
    to the claim (a TCP and auth handshake each, a server process forked for each, the
    app loop's CPU for each), where the same burst a minute later found them open. A
    connection that fails to open is not retried here: the pool opens it when needed."""
    if engine.dialect.name != "postgresql" or size <= 0:
        return 0
    async with contextlib.AsyncExitStack() as stack:
        opened = await asyncio.gather(
            *(stack.enter_async_context(engine.connect()) for _ in range(size)),
            return_exceptions=True,
        )
    failed = [o for o in opened if isinstance(o, BaseException)]
    if len(failed) == len(opened):
        raise failed[0]
    return len(opened) - len(failed)


SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run beside the single writer; busy_timeout waits instead of failing
    # when another connection holds the write lock.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_reset(dbapi_connection: Any, _record: Any, reset_state: Any) -> None:
    # The pool's rollback on every return is one more trip to aiosqlite's thread, after each
    # commit and each read: roll back only a connection still in a transaction.
    if reset_state.terminate_only:
        return
    raw = getattr(getattr(dbapi_connection, "_connection", None), "_connection", None)
    if raw is None or raw.in_transaction:
        dbapi_connection.rollback()


# SQLite has one writer lock per file. Writers in this process queue here instead of all
# spinning on busy_timeout at once (many parallel audit records used to run out of it and
# fail with "database is locked"); the checkpointer's single connection is the only other
# writer, and it waits on busy_timeout as well.
_WRITERS: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def single_writer(engine: AsyncEngine) -> AsyncIterator[None]:
    """One writer at a time on a SQLite engine (no-op for PostgreSQL)."""
    if engine.dialect.name != "sqlite":
        yield
        return
    lock = _WRITERS.setdefault(engine.sync_engine, asyncio.Lock())
    async with lock:
        yield
