"""The ticket store's idempotency records: a write call's key, its stored answer, its claim.

A key belongs to one call (tool and arguments, by fingerprint) of one subject: repeating the
call returns the first answer, another call under the key is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from mcp_servers.auth import Caller
from mcp_servers.errors import IdempotencyConflictError
from mcp_servers.ticketing.schema import fingerprint, idempotency

M = TypeVar("M", bound=BaseModel)

_ATTEMPTS = 5

# Built once (as are the store's hot statements): building a Core statement per call was a
# large part of the store's CPU per approved comment.
_PREVIOUS = sa.select(idempotency.c.tool, idempotency.c.fingerprint, idempotency.c.result).where(
    idempotency.c.subject == sa.bindparam("subject"), idempotency.c.key == sa.bindparam("key")
)
REMEMBER = idempotency.insert()
# For a read that carries the call's record along (LEFT OUTER JOIN ... ON these).
EARLIER_COLUMNS = (
    idempotency.c.tool.label("earlier_tool"),
    idempotency.c.fingerprint.label("earlier_fingerprint"),
    idempotency.c.result.label("earlier_result"),
)
EARLIER_JOIN = (
    idempotency,
    sa.and_(
        idempotency.c.subject == sa.bindparam("subject"),
        idempotency.c.key == sa.bindparam("idempotency_key"),
    ),
)
# Claiming a key that is taken inserts nothing instead of failing: a failed INSERT would be
# logged as an ERROR by the PostgreSQL server on every repeated call. (An async result keeps
# an INSERT's rowcount only when asked to.)
_CLAIMS = {
    name: dialect.insert(idempotency)
    .on_conflict_do_nothing()
    .execution_options(preserve_rowcount=True)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


@dataclass(frozen=True, slots=True)
class Call:
    """One write call as its idempotency record names it."""

    subject: str
    actor: str | None
    key: str
    tool: str
    digest: str

    @classmethod
    def of(cls, caller: Caller, tool: str, args: dict[str, Any], idempotency_key: str) -> Call:
        return cls(caller.subject, caller.actor, idempotency_key, tool, fingerprint(tool, args))

    def record(self, result: BaseModel, now: str) -> dict[str, Any]:
        """The idempotency row that answers this call's repeats with ``result``."""
        return {
            "subject": self.subject,
            "key": self.key,
            "tool": self.tool,
            "fingerprint": self.digest,
            "result": result.model_dump_json(),
            "created_at": now,
        }


async def stored(conn: AsyncConnection, call: Call, model: type[M]) -> M | None:
    """The first answer under this key, None if it is free; refused if used otherwise."""
    previous = await conn.execute(_PREVIOUS, {"subject": call.subject, "key": call.key})
    row = previous.first()
    return None if row is None else _answer(row.tool, row.fingerprint, row.result, call, model)


def earlier(row: sa.RowMapping, call: Call, model: type[M]) -> M | None:
    """As ``stored``, from a row read with ``EARLIER_COLUMNS``."""
    if row["earlier_tool"] is None:
        return None
    tool, digest = row["earlier_tool"], row["earlier_fingerprint"]
    return _answer(tool, digest, row["earlier_result"], call, model)


def _answer(tool: str, digest: str, result: str, call: Call, model: type[M]) -> M:
    if tool != call.tool or digest != call.digest:
        raise IdempotencyConflictError(
            f"idempotency key {call.key!r} was already used for a different "
            f"call ({tool}); use a new key for a new change"
        )
    return model.model_validate_json(result)


async def claim(conn: AsyncConnection, call: Call, result: M, now: str) -> M | None:
    """Record ``result`` under the key (None); if the key is taken, write nothing and return
    its first answer (or refuse, as ``stored``).

    Claiming first spares a look-up on every first call; the repeat, rarer, pays it.
    """
    statement = _CLAIMS.get(conn.dialect.name)
    if statement is None:  # no ON CONFLICT here: look first; a race fails and is retried
        if (earlier := await stored(conn, call, type(result))) is not None:
            return earlier
        await conn.execute(REMEMBER, call.record(result, now))
        return None
    # On PostgreSQL this waits for another instance's uncommitted claim of the same key.
    if (await conn.execute(statement, call.record(result, now))).rowcount == 1:
        return None
    earlier = await stored(conn, call, type(result))
    if earlier is None:  # records are never deleted: one was there a statement ago
        raise RuntimeError(f"idempotency key {call.key!r} is taken but has no record")
    return earlier


async def retrying(attempt: Callable[[], Awaitable[M]]) -> M:
    """Run ``attempt`` again when a unique constraint refused its transaction.

    Another server instance may commit the same key (or the same new ticket number) between
    our read and our insert: the constraint refuses ours, the transaction rolls back, and
    the next attempt sees their record.
    """
    for n in range(_ATTEMPTS):
        try:
            return await attempt()
        except sa.exc.IntegrityError:
            if n == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
