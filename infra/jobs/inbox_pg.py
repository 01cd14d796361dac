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
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import bindparam, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.jobs.queue import JobStatus
from infra.storage.schema import UtcDateTime


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


_STORE = text(
    """
WITH batch AS (
    SELECT * FROM json_to_recordset(CAST(:batch AS json)) AS b(
        ord integer, event_id text, platform text, job_id text, kind text, user_key text,
        payload json
    )
),
claimed AS (
    INSERT INTO processed_events (event_id, platform, received_at)
    SELECT DISTINCT ON (event_id) event_id, platform, :now
    FROM batch WHERE event_id IS NOT NULL
    ORDER BY event_id, ord
    ON CONFLICT (event_id) DO NOTHING
    RETURNING event_id
),
queued AS (
    INSERT INTO run_jobs (job_id, kind, user_key, payload, status, attempts, created_at)
    SELECT DISTINCT ON (job_id) job_id, kind, user_key, payload, :status, 0, :now
    FROM batch
    WHERE event_id IS NULL OR event_id IN (SELECT event_id FROM claimed)
    ORDER BY job_id, ord
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id
)
SELECT job_id FROM queued
"""
).bindparams(bindparam("now", type_=UtcDateTime()))


async def store_on_postgres(
    engine: AsyncEngine, deliveries: Sequence[Delivery], now: datetime
) -> set[str]:
    """The batch's job ids stored now (not those a delivery before had stored)."""
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
    params = {"batch": json.dumps(rows), "status": JobStatus.QUEUED.value, "now": now}
    try:
        return await _execute(engine, params)
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    # The pooled connection was dead (the ack engine does not ping on checkout): the pool
    # dropped it; once more on a new one. Safe: the statement is atomic, and if it did commit
    # before the connection broke, the second finds the ids stored (a redelivery, no loss).
    return await _execute(engine, params)


async def _execute(engine: AsyncEngine, params: dict[str, Any]) -> set[str]:
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return {str(j) for (j,) in (await auto.execute(_STORE, params)).all()}
