"""The audit log: redaction before writing, pending/outcome pairs, queries, append-only storage."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from audit import (
    AuditLog,
    AuditQuery,
    AuditQueryError,
    AuditSink,
    EventKind,
    MemoryAuditSink,
    SqlAuditSink,
    error_outcome,
    redact,
    summarise,
)
from infra.storage import create_engine

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
SLACK_TOKEN = "xoxb-1234567890-abcdefghijkl"


class StepClock:
    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> datetime:
        return T0 + timedelta(minutes=next(self._ticks))


def make_log(sink: AuditSink) -> AuditLog:
    ids = itertools.count()
    return AuditLog(
        sink, clock=StepClock(), new_id=lambda: f"ev-{next(ids)}", max_payload_bytes=512
    )


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def sink(request: pytest.FixtureRequest) -> AsyncIterator[AuditSink]:
    if request.param == "memory":
        yield MemoryAuditSink()
        return
    engine = create_engine(request.getfixturevalue(f"{request.param}_url"))
    yield SqlAuditSink(engine)
    await engine.dispose()


def test_secrets_are_removed_and_pii_masked() -> None:
    cleaned = redact(
        {
            "comment": f"ping bob@example.com or +44 20 7946 0958; token {JWT} and {SLACK_TOKEN}",
            "access_token": "opaque-value-without-a-pattern",
            "headers": {"Authorization": "Bearer abc.def.ghi"},
            "ticket_id": "PAY-1234567890",
            "when": "2026-12-02 12:00",
            "count": 3,
        }
    )
    text = str(cleaned)
    assert JWT not in text
    assert SLACK_TOKEN not in text
    assert "opaque-value-without-a-pattern" not in text
    assert "abc.def.ghi" not in text
    assert "bob@example.com" not in text
    assert "b***@example.com" in text  # agent_core.pii.mask_pii
    assert "7946 0958" not in text
    assert cleaned["ticket_id"] == "PAY-1234567890"
    assert cleaned["when"] == "2026-12-02 12:00"
    assert cleaned["count"] == 3


def test_large_payloads_become_a_hash_of_the_redacted_form() -> None:
    big = {"body": "x" * 5000, "owner": "carol@example.com"}
    summary = summarise(big, max_bytes=1024)
    assert set(summary) == {"sha256", "bytes"}
    assert summary["bytes"] > 1024
    assert summarise(big, max_bytes=1024) == summary  # stable
    assert summarise({"a": 1}, max_bytes=1024) == {"a": 1}


async def test_events_are_redacted_before_they_reach_storage(sink: AuditSink) -> None:
    log = make_log(sink)
    await log.record(
        EventKind.DECISION,
        requester="alice",
        thread_id="thr-1",
        tool="ticketing_update_ticket",
        approval_id="apr-1",
        approver="bob",
        decision="edit",
        args={"ticket_id": "PAY-7", "comment": f"from alice@example.com {JWT}"},
        edited_args={"ticket_id": "PAY-7", "comment": "call 555-123-4567"},
        detail={"note": SLACK_TOKEN},
    )
    [event] = await log.query(AuditQuery(thread_id="thr-1"))
    stored = repr(event)
    for raw in (JWT, SLACK_TOKEN, "alice@example.com", "555-123-4567"):
        assert raw not in stored
    assert event.args_summary["ticket_id"] == "PAY-7"
    assert event.approver == "bob"
    assert event.decision == "edit"
    assert event.edited_args_summary == {"ticket_id": "PAY-7", "comment": "call ********4567"}


async def test_a_write_leaves_a_pending_and_an_outcome_record(sink: AuditSink) -> None:
    log = make_log(sink)
    pending = await log.write_pending(
        requester="alice",
        thread_id="thr-1",
        tool="ticketing_close_ticket",
        args={"ticket_id": "PAY-7"},
        idempotency_key="apr-k1",
        approval_id="apr-1",
        approver="bob",
        decision="approve",
    )
    other = await log.write_pending(
        requester="alice",
        thread_id="thr-1",
        tool="ticketing_add_comment",
        args={"ticket_id": "PAY-7"},
        idempotency_key="apr-k2",
    )
    assert [e.idempotency_key for e in await log.unresolved_writes()] == ["apr-k1", "apr-k2"]
    await log.write_outcome(pending, outcome="success", latency_ms=12.5)
    assert [e.event_id for e in await log.unresolved_writes()] == [other.event_id]
    await log.write_outcome(other, outcome=error_outcome(TimeoutError()))
    assert await log.unresolved_writes() == []
    events = await log.query(AuditQuery(idempotency_key="apr-k1"))
    assert [(e.kind, e.outcome) for e in events] == [
        (EventKind.WRITE_PENDING, "pending"),
        (EventKind.WRITE_OUTCOME, "success"),
    ]
    assert events[1].approver == "bob"
    assert events[1].latency_ms == 12.5


async def test_queries_by_user_thread_and_time(sink: AuditSink) -> None:
    log = make_log(sink)
    for i, (user, thread) in enumerate([("alice", "t1"), ("dave", "t2"), ("alice", "t3")]):
        await log.tool_call(
            requester=user,
            thread_id=thread,
            tool="ticketing_get_ticket",
            args={"ticket_id": f"PAY-{i}"},
            outcome="success",
            latency_ms=1.0,
            model_used="scripted",
        )
    assert [e.thread_id for e in await log.query(AuditQuery(requester="alice"))] == ["t1", "t3"]
    assert [e.requester for e in await log.query(AuditQuery(thread_id="t2"))] == ["dave"]
    window = AuditQuery(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=2))
    assert [e.thread_id for e in await log.query(window)] == ["t2", "t3"]
    assert [e.model_used for e in await log.query(AuditQuery(limit=1))] == ["scripted"]
    with pytest.raises(AuditQueryError):
        AuditQuery(since=T0, until=T0 - timedelta(seconds=1))


@pytest.mark.postgres
async def test_update_and_delete_fail_in_postgres(postgres_url: str) -> None:
    await _assert_append_only(postgres_url)


async def test_update_and_delete_fail_in_sqlite(sqlite_url: str) -> None:
    await _assert_append_only(sqlite_url)


async def _assert_append_only(url: str) -> None:
    engine = create_engine(url)
    try:
        log = make_log(SqlAuditSink(engine))
        await log.tool_call(
            requester="alice",
            thread_id="t1",
            tool="ticketing_get_ticket",
            args={},
            outcome="success",
            latency_ms=1.0,
        )
        for statement in (
            "UPDATE audit_events SET outcome = 'forged'",
            "DELETE FROM audit_events",
        ):
            with pytest.raises(DBAPIError, match="append-only"):
                async with engine.begin() as conn:
                    await conn.execute(sa.text(statement))
        if engine.dialect.name == "postgresql":
            with pytest.raises(DBAPIError, match="append-only"):
                async with engine.begin() as conn:
                    await conn.execute(sa.text("TRUNCATE audit_events"))
        [event] = await log.query(AuditQuery())
        assert event.outcome == "success"
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_the_suite_scan_finds_a_planted_token_and_email(postgres_url: str) -> None:
    from tests.fixtures.audit import audit_leaks

    engine = create_engine(postgres_url)
    try:
        log = make_log(SqlAuditSink(engine))
        await log.tool_call(
            requester="alice",
            thread_id="t1",
            tool="ticketing_get_ticket",
            args={"note": f"mail carol@example.com {JWT}"},
            outcome="success",
            latency_ms=1.0,
        )
        assert audit_leaks(postgres_url) == []  # redacted on the way in
        # Bypassing the log (as a buggy writer would) is caught by the scan.
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO audit_events (event_id, at, kind, detail)"
                    " VALUES ('planted', now(), 'tool_call', CAST(:d AS json))"
                ),
                {"d": f'{{"x": "carol@example.com {SLACK_TOKEN}"}}'},
            )
        assert len(audit_leaks(postgres_url)) == 1
        # Leave the table clean for the suite-wide scan (superuser bypass, like the fixture).
        async with engine.begin() as conn:
            await conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            await conn.execute(sa.text("DELETE FROM audit_events WHERE event_id = 'planted'"))
    finally:
        await engine.dispose()
