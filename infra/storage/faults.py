"""Which database failures are the connection's, not the request's — decided in one place.

A connection error (the server restarting, a dead pooled connection, no connection free in
time) says nothing about the work that hit it: the same work succeeds once the database is
back, so a job that failed with one goes back in the queue. Anything else (a constraint, a
missing table, a bug) fails the same way again and is a real failure.

Example::

    try:
        await run(job)
    except Exception as exc:
        if is_connection_error(exc):
            ...  # retry later
"""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg_pool
import sqlalchemy.exc

# psycopg's OperationalError covers the connection (AdminShutdown, CannotConnectNow,
# ConnectionFailure...) and operator actions (QueryCanceled, LockNotAvailable): all pass.
_TRANSIENT: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg_pool.PoolTimeout,
    psycopg_pool.TooManyRequests,
    sqlalchemy.exc.TimeoutError,  # SQLAlchemy's own pool: no connection in time
    ConnectionError,
)


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it, or any exception in a group) is a connection
    error: worth retrying the same work once the database answers again."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if _is_transient(current):
            return True
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
    return False


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, sqlalchemy.exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        return _is_transient(exc.orig) if exc.orig is not None else False
    if isinstance(exc, sqlite3.OperationalError):
        # The only passing one on SQLite: another process holds the write lock.
        return "locked" in str(exc)
    return isinstance(exc, _TRANSIENT)
