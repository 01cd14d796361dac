"""Taking a queued row (a job, a notice) for one worker: one compare-and-set, so of any
number of workers that read the row, exactly one takes it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Table, update
from sqlalchemy.ext.asyncio import AsyncEngine


async def take_lease(
    engine: AsyncEngine,
    table: Table,
    still_as_read: Sequence[ColumnElement[bool]],
    *,
    status: str,
    owner: str,
    lease_until: datetime,
    attempts: int,
) -> bool:
    """Give the row to ``owner`` until ``lease_until`` (its ``status``, ``owner``,
    ``lease_until`` and ``attempts`` columns) if it is still as it was read
    (``still_as_read``); ``True`` when this call took it."""
    async with engine.begin() as conn:
        result = await conn.execute(
            update(table)
            .where(*still_as_read)
            .values(status=status, owner=owner, lease_until=lease_until, attempts=attempts)
        )
    return result.rowcount == 1
