"""``SqlAuditSink``: rows appended at once go in one transaction; each caller returns once
its own row is committed, and one bad row fails only its own caller."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from sqlalchemy import event as sa_event

from audit import AuditLog, AuditQuery, EventKind, SqlAuditSink
from infra.storage import create_engine


async def test_appends_at_once_share_a_transaction_and_keep_their_order(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    begun: list[int] = []
    sa_event.listen(engine.sync_engine, "begin", lambda _conn: begun.append(1))
    log = AuditLog(SqlAuditSink(engine))
    try:
        await asyncio.gather(
            *(
                log.record(EventKind.DECISION, requester="alice", tool="t", outcome=f"n{i}")
                for i in range(20)
            )
        )
        assert len(begun) <= 2  # was one transaction per row
        rows = await log.query(AuditQuery(kinds=(EventKind.DECISION,), limit=100))
        assert [r.outcome for r in rows] == [f"n{i}" for i in range(20)]
    finally:
        await engine.dispose()


async def test_a_bad_row_fails_only_its_own_append(database_url: str) -> None:
    engine = create_engine(database_url)
    sink = SqlAuditSink(engine)
    log = AuditLog(sink)
    try:
        first = await log.record(EventKind.DECISION, requester="alice", outcome="first")
        again = dataclasses.replace(first, outcome="same id")  # event_id is unique
        fresh = [dataclasses.replace(first, event_id=f"ev-{i}", outcome=f"ok{i}") for i in range(3)]
        results: list[Any] = await asyncio.gather(
            sink.append(fresh[0]),
            sink.append(again),
            sink.append(fresh[1]),
            sink.append(fresh[2]),
            return_exceptions=True,
        )
        assert results[0] is None
        assert isinstance(results[1], Exception)
        assert results[2:] == [None, None]
        rows = await log.query(AuditQuery(kinds=(EventKind.DECISION,), limit=100))
        assert [r.outcome for r in rows] == ["first", "ok0", "ok1", "ok2"]
    finally:
        await engine.dispose()


async def test_a_lone_append_is_written_before_it_returns(database_url: str) -> None:
    engine = create_engine(database_url)
    log = AuditLog(SqlAuditSink(engine))
    try:
        await log.record(EventKind.DECISION, requester="alice", outcome="lone")
        other = AuditLog(SqlAuditSink(engine))  # another reader sees it at once
        rows = await other.query(AuditQuery(kinds=(EventKind.DECISION,), limit=10))
        assert [r.outcome for r in rows] == ["lone"]
    finally:
        await engine.dispose()
