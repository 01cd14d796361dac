"""``JobInbox``'s batch on PostgreSQL in one round trip: claim the delivery ids and queue the
jobs of those claimed just now, in one statement run in autocommit.

Why: BEGIN, the two INSERTs and COMMIT were four round trips per batch, each one waiting for
the GIL again on the ack thread while agents compute. A single statement is atomic by
itself (both INSERTs of a data-modifying CTE commit or neither does), so autocommit keeps
"acked ⇒ stored" and the dedup of the two-statement version:

- ``claimed``: each batch delivery id once (the first delivery's platform), ON CONFLICT DO
  NOTHING, so ``RETURNING`` names only the ids nobody stored before;
- ``queued``: the jobs of deliveries without an id or whose id is in ``claimed``, each job id
  once (the first delivery's row), ON CONFLICT DO NOTHING; ``RETURNING`` names the new jobs.

A concurrent writer inserting the same id waits on its row lock and then does nothing, as
in the transaction. The rows travel as one JSON document (``json_to_recordset``), so the SQL
text is the same for every batch size: psycopg prepares it on the server after a few uses
(one text per size before, each prepared again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import psycopg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from infra.characters import NUL_OR_LONE_SURROGATE, holds_surrogate_escape, replace_in_strings
from infra.jobs.queue import JobStatus


class Delivery(Protocol):
    """What a batch row needs of ``infra.jobs.inbox.Delivery`` (named here, not imported:
    ``inbox`` imports this module)."""

    @property
    def job_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def user_key(self) -> str: ...
    @property
    def payload(self) -> Mapping[str, Any]: ...
    @property
    def event_id(self) -> str | None: ...
    @property
    def platform(self) -> str: ...


# psycopg's own placeholders: the statement goes to the driver as it is (``_execute``).
_STORE_SQL = """
WITH batch AS (
    SELECT * FROM json_to_recordset(CAST(%(batch)s AS json)) AS b(
        ord integer, event_id text, platform text, job_id text, kind text, user_key text,
        payload json
    )
),
claimed AS (
    INSERT INTO processed_events (event_id, platform, received_at)
    SELECT DISTINCT ON (event_id) event_id, platform, %(now)s
    FROM batch WHERE event_id IS NOT NULL
    ORDER BY event_id, ord
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
),
queued AS (
    INSERT INTO run_jobs (job_id, kind, user_key, payload, status, attempts, created_at)
    SELECT DISTINCT ON (job_id) job_id, kind, user_key, payload, %(status)s, 0, %(now)s
    FROM batch
    WHERE event_id IS NULL OR event_id IN (SELECT event_id FROM claimed)
    ORDER BY job_id, ord
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id
)
SELECT job_id FROM queued
"""


class PgStore:
    """Stores batches on the engine's PostgreSQL connections, each kept checked out between
    batches (at most one per writer: ``JobInbox`` runs ``writers`` batches at a time) and
    given back to the pool by ``close``.

    Why kept: checking a connection out of SQLAlchemy's pool and back in (its events, the
    reset, the AsyncConnection around it) was ~60 us of the ack thread's CPU per batch."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._idle: list[AsyncConnection] = []

    async def store(self, deliveries: Sequence[Delivery], now: datetime) -> set[str]:
        """The batch's job ids stored now (not those a delivery before had stored)."""
        params = _params(deliveries, now)
        try:
            return await self._on_a_connection(params)
        except _DeadConnection:
            pass
        # The connection was dead (the ack engine does not ping): it was dropped; once more
        # on a new one. Safe: the statement is atomic, and if it did commit before the
        # connection broke, the second finds the ids stored (a redelivery, no loss).
        try:
            return await self._on_a_connection(params)
        except _DeadConnection as dead:
            raise dead.error from None

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    async def _on_a_connection(self, params: dict[str, Any]) -> set[str]:
        conn = self._idle.pop() if self._idle else await self._engine.connect()
        try:
            stored = await _execute(conn, params)
        except BaseException:
            await conn.close()  # a dead one was invalidated: the pool drops it
            raise
        self._idle.append(conn)
        return stored


def _params(deliveries: Sequence[Delivery], now: datetime) -> dict[str, Any]:
    # The rows as one JSON document (json.dumps, as SQLAlchemy's JSON type sends a payload):
    # one text parameter to send, where arrays of text had psycopg quote each element.
    rows = [
        {
            "ord": n,
            "event_id": d.event_id or None,
            "platform": d.platform,
            "job_id": d.job_id,
            "kind": d.kind,
            "user_key": d.user_key,
            "payload": dict(d.payload),
        }
        for n, d in enumerate(deliveries)
    ]
    if now.tzinfo is None:
        raise ValueError("naive datetime: opsbot stores aware UTC timestamps only")
    batch = json.dumps(rows)
    if _NUL_ESCAPE in batch or holds_surrogate_escape(batch):  # only then is the batch walked
        batch = json.dumps(replace_in_strings(rows, NUL_OR_LONE_SURROGATE))
    return {"batch": batch, "status": JobStatus.QUEUED.value, "now": now.astimezone(UTC)}


# PostgreSQL's text cannot hold U+0000, nor its JSON a lone surrogate (JSON's escapes allow
# one, and Python decodes it), and ``json_to_recordset`` reads every string of the batch: one
# such character anywhere (a chat message or a name may carry one) failed the whole batch,
# and every delivery in it, other people's too, was answered 503 and failed again when
# redelivered. Each is stored as U+FFFD instead. The escapes looked for also start a user's
# literal backslash-u text or an emoji's surrogate pair: the walk then changes nothing.
_NUL_ESCAPE = "\\u0000"


class _DeadConnection(Exception):
    def __init__(self, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.error = error


async def _execute(conn: AsyncConnection, params: dict[str, Any]) -> set[str]:
    """The statement on the connection's psycopg connection itself.

    Why not ``conn.execute``: SQLAlchemy's statement path (execution context, result
    wrapping, each driver call through a greenlet) cost ~170 us of the ack thread's CPU per
    batch, about a third of the batch, for one statement whose SQL and parameters are fixed
    here (measured: 600 us per batch of 4 through SQLAlchemy, 430 us on the driver)."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise TypeError("the PostgreSQL inbox needs psycopg's async driver")
    if not driver.autocommit:
        # An engine not made for the ack path (tests): autocommit while this connection is
        # held; SQLAlchemy puts its isolation back when it returns to the pool.
        await conn.execution_options(isolation_level="AUTOCOMMIT")
    try:
        cursor = await driver.execute(_STORE_SQL, params)
        return {str(j) for (j,) in await cursor.fetchall()}
    except psycopg.Error as exc:
        if driver.broken or driver.closed:
            await conn.invalidate()
            raise _DeadConnection(exc) from exc
        raise
