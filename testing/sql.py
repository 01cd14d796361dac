"""Count the SQL a piece of code sends, on SQLite and PostgreSQL alike (tests and bench).

Every database client opsbot uses goes through one of two async drivers: ``aiosqlite``
(SQLAlchemy's SQLite dialect and the SQLite checkpointer) and ``psycopg`` (SQLAlchemy's
PostgreSQL dialect, the checkpointer's pool). ``count_statements`` wraps their execute,
executemany and commit methods for the duration of the block, so every statement and every
commit sent by the block's own tasks is counted (one per call: an ``executemany`` is one);
the liveness check a pool makes on checkout (an empty statement) is counted apart.

Example::

    with count_statements() as sql:
        await agent.run(alice, thread_id, "show PAY-1")
    assert sql.total <= 12
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiosqlite
import psycopg
from aiosqlite.context import contextmanager as aiosqlite_contextmanager

# (class, method, kind): the calls that send a statement or a commit to the server.
_TARGETS: tuple[tuple[type[Any], str, str], ...] = (
    (aiosqlite.Connection, "execute", "execute"),
    (aiosqlite.Connection, "executemany", "execute"),
    (aiosqlite.Connection, "executescript", "execute"),
    (aiosqlite.Connection, "execute_insert", "execute"),
    (aiosqlite.Connection, "execute_fetchall", "execute"),
    (aiosqlite.Connection, "commit", "commit"),
    (aiosqlite.Cursor, "execute", "execute"),
    (aiosqlite.Cursor, "executemany", "execute"),
    (psycopg.AsyncCursor, "execute", "execute"),
    (psycopg.AsyncCursor, "executemany", "execute"),
    (psycopg.AsyncConnection, "commit", "commit"),
)


# The count the running task's statements go to: tasks started inside the block inherit
# it; a server in the same process (a test's MCP server and its database) does not.
_COUNTING: contextvars.ContextVar[StatementCount | None] = contextvars.ContextVar(
    "opsbot_sql_count", default=None
)


@dataclass
class StatementCount:
    """Statements and commits sent while the block ran; ``kinds`` by first SQL word."""

    executes: int = 0
    commits: int = 0
    pings: int = 0  # pool liveness checks on checkout (``;``), not the code's statements
    kinds: Counter[str] = field(default_factory=Counter)
    log: list[str] = field(default_factory=list, repr=False)

    @property
    def total(self) -> int:
        return self.executes + self.commits


def _first_word(args: tuple[Any, ...]) -> str:
    sql = args[0] if args else ""
    text = sql if isinstance(sql, (str, bytes)) else str(sql)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    words = text.replace("(", " ").split()
    return words[0].strip(";").upper() if words and words[0].strip(";") else "EMPTY"


@contextlib.contextmanager
def count_statements() -> Iterator[StatementCount]:
    """Count every statement and commit sent by this process while the block runs."""
    count = StatementCount()
    originals: list[tuple[type[Any], str, Any]] = []

    def counting(original: Any, kind: str) -> Any:
        @functools.wraps(original)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _COUNTING.get() is not count:
                return await original(self, *args, **kwargs)
            if kind == "commit":
                count.commits += 1
            elif _first_word(args) == "EMPTY":
                count.pings += 1
            else:
                count.executes += 1
                with contextlib.suppress(Exception):
                    count.kinds[_first_word(args)] += 1
                    count.log.append(str(args[0])[:90] if args else "")
            return await original(self, *args, **kwargs)

        return wrapper

    try:
        for cls, name, kind in _TARGETS:
            original = cls.__dict__.get(name)
            if original is None:
                continue
            originals.append((cls, name, original))
            if inspect.iscoroutinefunction(original):
                setattr(cls, name, counting(original, kind))
            else:
                # aiosqlite's ``Connection.execute`` and friends return a ``Result`` (awaited
                # or used with ``async with``): count the coroutine inside, keep the wrapper.
                inner = counting(original.__wrapped__, kind)
                setattr(cls, name, aiosqlite_contextmanager(inner))
        token = _COUNTING.set(count)
        try:
            yield count
        finally:
            _COUNTING.reset(token)
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)
