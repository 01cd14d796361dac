"""Count the SQL a piece of code sends, on SQLite and PostgreSQL alike (tests and bench).

Every database client opsbot uses goes through one of two async drivers: ``aiosqlite``
(SQLAlchemy's SQLite dialect and the SQLite checkpointer) and ``psycopg`` (SQLAlchemy's
PostgreSQL dialect, the checkpointer's pool). ``count_statements`` wraps their execute,
executemany and commit methods for the duration of the block, so every statement and every
commit is counted, whoever sends it (one count per call: an ``executemany`` is one).

Example::

    with count_statements() as sql:
        await agent.run(alice, thread_id, "show PAY-1")
    assert sql.total <= 12
"""

from __future__ import annotations

import contextlib
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


@dataclass
class StatementCount:
    """Statements and commits sent while the block ran; ``kinds`` by first SQL word."""

    executes: int = 0
    commits: int = 0
    kinds: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.executes + self.commits


def _first_word(args: tuple[Any, ...]) -> str:
    sql = args[0] if args else ""
    text = sql if isinstance(sql, str) else getattr(sql, "as_string", lambda: str(sql))()
    return (str(text).split() or ["?"])[0].upper()


@contextlib.contextmanager
def count_statements() -> Iterator[StatementCount]:
    """Count every statement and commit sent by this process while the block runs."""
    count = StatementCount()
    originals: list[tuple[type[Any], str, Any]] = []

    def counting(original: Any, kind: str) -> Any:
        @functools.wraps(original)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if kind == "commit":
                count.commits += 1
            else:
                count.executes += 1
                with contextlib.suppress(Exception):
                    count.kinds[_first_word(args)] += 1
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
        yield count
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)
