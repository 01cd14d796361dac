"""The append-only audit log: who did what, when, and who approved it.

Every event is redacted before it reaches storage (secrets removed, PII masked, large
payloads hashed); tool outputs are never logged. A write is recorded twice, append-only:
``write_pending`` before the call and ``write_outcome`` after it, joined by the idempotency
key, so a pending record with no outcome points at an ambiguous write (see ``audit.reconcile``).

Example::

    log = AuditLog(SqlAuditSink(engine))
    await log.write_pending(requester="alice", thread_id=t, tool="ticketing_close_ticket",
                            args={...}, idempotency_key=k, approval_id=a, approver="bob")
    await log.write_outcome(..., outcome="success", latency_ms=41.0)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, NotRequired, Protocol, TypedDict, Unpack

from sqlalchemy import RowMapping, and_, exists, select
from sqlalchemy.ext.asyncio import AsyncEngine

from audit.errors import AuditQueryError
from audit.redaction import DEFAULT_MAX_BYTES, redact, redact_text, summarise
from infra.clock import Clock, IdFactory, random_id, utc_now
from infra.storage.engine import single_writer
from infra.storage.schema import audit_events


class EventKind(StrEnum):
    TOOL_CALL = "tool_call"  # a read (or any call not split in two)
    WRITE_PENDING = "write_pending"  # before a write call leaves the process
    WRITE_OUTCOME = "write_outcome"  # after it: success / error:<class> / rejected
    APPROVAL_REQUESTED = "approval_requested"
    DECISION = "decision"  # approve / edit / reject by an approver (or expiry)
    APPROVAL_FINISHED = "approval_finished"
    FEEDBACK = "feedback"  # a person's thumbs up/down on an answer (outcome: positive/negative)
    RUN_STOPPED = "run_stopped"  # the requester pressed Stop (detail: what stopped)


class _ToolUse(TypedDict):
    """Who used which tool in which thread, with what: every tool event names these."""

    requester: str
    thread_id: str
    tool: str
    args: Any
    model_used: NotRequired[str | None]
    detail: NotRequired[dict[str, Any] | None]


class ToolCall(_ToolUse):
    """A read's call (``AuditLog.tool_call``)."""

    outcome: str
    latency_ms: float | None


class WritePending(_ToolUse):
    """A write about to run (``AuditLog.write_pending``), before its outcome is known."""

    idempotency_key: str
    approval_id: NotRequired[str | None]
    approver: NotRequired[str | None]
    decision: NotRequired[str | None]


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audit record, already redacted."""

    event_id: str
    at: datetime
    kind: EventKind
    requester: str | None = None
    thread_id: str | None = None
    tool: str | None = None
    args_summary: Any = None
    outcome: str | None = None
    latency_ms: float | None = None
    model_used: str | None = None
    approval_id: str | None = None
    approver: str | None = None
    decision: str | None = None
    edited_args_summary: Any = None
    idempotency_key: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditQuery:
    requester: str | None = None
    thread_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    kinds: tuple[EventKind, ...] = ()
    idempotency_key: str | None = None
    approval_id: str | None = None
    limit: int = 200

    def __post_init__(self) -> None:
        if self.since and self.until and self.since > self.until:
            raise AuditQueryError("'since' is after 'until'")
        if self.limit <= 0:
            raise AuditQueryError("limit must be positive")


class AuditSink(Protocol):
    """Storage for audit events: append and read, never change."""

    async def append(self, event: AuditEvent) -> None: ...

    async def query(self, q: AuditQuery) -> list[AuditEvent]:
        """Matching events, oldest first."""
        ...

    async def unresolved_writes(self, limit: int = 200) -> list[AuditEvent]:
        """``write_pending`` events with no later ``write_outcome`` for their idempotency
        key, or only ambiguous ones (``AMBIGUOUS_OUTCOMES``: timed out, server unreachable...).
        """
        ...


# Outcomes after which a write may or may not have happened: the write stays unresolved
# until the reconciler finds it in (or missing from) the server's change log.
AMBIGUOUS_OUTCOMES = frozenset(
    {
        "error:interrupted",
        "error:ToolTimeoutError",
        "error:ToolTransientError",
        "error:ServerUnavailableError",
    }
)


def error_outcome(exc: BaseException) -> str:
    """The outcome label for a failure: its class, never its message."""
    return f"error:{type(exc).__name__}"


# A write's outcome event repeats who, where, what and under which approval from its pending
# event, so each can be read (and queried) on its own.
_CARRIED_TO_OUTCOME = (
    "requester",
    "thread_id",
    "tool",
    "idempotency_key",
    "approval_id",
    "approver",
    "decision",
    "model_used",
)


@dataclass(eq=False)
class AuditLog:
    """Builds redacted events and appends them to a sink."""

    sink: AuditSink
    _: KW_ONLY
    clock: Clock = utc_now
    new_id: IdFactory = random_id
    max_payload_bytes: int = DEFAULT_MAX_BYTES

    async def record(
        self,
        kind: EventKind,
        *,
        args: Any = None,
        edited_args: Any = None,
        detail: dict[str, Any] | None = None,
        **fields: Any,
    ) -> AuditEvent:
        """Append one event; ``args``/``edited_args``/``detail`` are redacted first."""
        for key in ("requester", "approver", "outcome", "decision", "model_used"):
            if isinstance(fields.get(key), str):
                fields[key] = redact_text(fields[key])
        limit = self.max_payload_bytes
        event = AuditEvent(
            event_id=self.new_id(),
            at=self.clock(),
            kind=kind,
            args_summary=None if args is None else summarise(args, max_bytes=limit),
            edited_args_summary=None
            if edited_args is None
            else summarise(edited_args, max_bytes=limit),
            detail=redact(detail or {}),
            **fields,
        )
        await self.sink.append(event)
        return event

    async def tool_call(self, **call: Unpack[ToolCall]) -> AuditEvent:
        return await self.record(EventKind.TOOL_CALL, **call)

    async def write_pending(self, **write: Unpack[WritePending]) -> AuditEvent:
        return await self.record(EventKind.WRITE_PENDING, outcome="pending", **write)

    async def write_outcome(
        self,
        pending: AuditEvent,
        *,
        outcome: str,
        latency_ms: float | None = None,
        detail: dict[str, Any] | None = None,
    ) -> AuditEvent:
        """The outcome of ``pending``'s write, as a new event (the pending one never changes)."""
        carried = {name: getattr(pending, name) for name in _CARRIED_TO_OUTCOME}
        return await self.record(
            EventKind.WRITE_OUTCOME,
            outcome=outcome,
            latency_ms=latency_ms,
            detail=detail,
            **carried,
        )

    async def query(self, q: AuditQuery) -> list[AuditEvent]:
        return await self.sink.query(q)

    async def unresolved_writes(self, limit: int = 200) -> list[AuditEvent]:
        return await self.sink.unresolved_writes(limit)


def _matches(e: AuditEvent, q: AuditQuery) -> bool:
    return (
        (q.requester is None or e.requester == q.requester)
        and (q.thread_id is None or e.thread_id == q.thread_id)
        and (q.since is None or e.at >= q.since)
        and (q.until is None or e.at <= q.until)
        and (not q.kinds or e.kind in q.kinds)
        and (q.idempotency_key is None or e.idempotency_key == q.idempotency_key)
        and (q.approval_id is None or e.approval_id == q.approval_id)
    )


class MemoryAuditSink:
    """In-process sink for unit tests: a list that only grows."""

    def __init__(self) -> None:
        self._events: list[AuditEvent] = []
        self._lock = asyncio.Lock()

    @property
    def events(self) -> Sequence[AuditEvent]:
        return tuple(self._events)

    async def append(self, event: AuditEvent) -> None:
        async with self._lock:
            self._events.append(event)

    async def query(self, q: AuditQuery) -> list[AuditEvent]:
        return [e for e in self._events if _matches(e, q)][: q.limit]

    async def unresolved_writes(self, limit: int = 200) -> list[AuditEvent]:
        found = []
        for i, e in enumerate(self._events):
            if e.kind is not EventKind.WRITE_PENDING:
                continue
            # Only a later outcome settles it: a retry sends the same key again.
            if not any(
                later.kind is EventKind.WRITE_OUTCOME
                and later.idempotency_key == e.idempotency_key
                and later.outcome not in AMBIGUOUS_OUTCOMES
                for later in self._events[i + 1 :]
            ):
                found.append(e)
        return found[:limit]


_COLUMNS = (
    "event_id",
    "at",
    "requester",
    "thread_id",
    "tool",
    "args_summary",
    "outcome",
    "latency_ms",
    "model_used",
    "approval_id",
    "approver",
    "decision",
    "edited_args_summary",
    "idempotency_key",
    "detail",
)


class SqlAuditSink:
    """The ``audit_events`` table (SQLite or PostgreSQL). Only INSERT and SELECT are issued.

    Events appended while an INSERT is on its way are written together next, in one
    transaction (twenty clicks' decisions and pending writes at once were twenty); each
    ``append`` returns once its own row is committed, and a batch that fails is written
    again row by row, so one bad row fails only its own caller."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._waiting: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._writing: asyncio.Task[None] | None = None

    async def append(self, event: AuditEvent) -> None:
        row = {name: getattr(event, name) for name in _COLUMNS}
        row["kind"] = event.kind.value
        loop = asyncio.get_running_loop()
        writing = self._writing
        if writing is not None and not writing.done() and writing.get_loop() is not loop:
            await self._insert([row])  # the batch belongs to another loop: on its own
            return
        written = loop.create_future()
        written.add_done_callback(_consume_failure)
        self._waiting.append((row, written))
        if writing is None or writing.done():
            self._writing = loop.create_task(self._write_waiting())
        await asyncio.shield(written)

    async def _write_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                await self._insert([row for row, _ in batch])
            except Exception as exc:
                if len(batch) == 1:
                    _settle(batch[0][1], exc)
                    continue
                for row, written in batch:  # one bad row fails only its own caller
                    try:
                        await self._insert([row])
                    except Exception as one:
                        _settle(written, one)
                    else:
                        _settle(written, None)
            else:
                for _, written in batch:
                    _settle(written, None)

    async def _insert(self, rows: list[dict[str, Any]]) -> None:
        async with single_writer(self._engine), self._engine.begin() as conn:
            # Parameters apart from the statement: one compiled INSERT, cached for every row
            # (``.values(**row)`` made SQLAlchemy key its cache on each row's values).
            await conn.execute(audit_events.insert(), rows if len(rows) > 1 else rows[0])

    async def query(self, q: AuditQuery) -> list[AuditEvent]:
        c = audit_events.c
        stmt = select(audit_events)
        if q.requester is not None:
            stmt = stmt.where(c.requester == q.requester)
        if q.thread_id is not None:
            stmt = stmt.where(c.thread_id == q.thread_id)
        if q.since is not None:
            stmt = stmt.where(c.at >= q.since)
        if q.until is not None:
            stmt = stmt.where(c.at <= q.until)
        if q.kinds:
            stmt = stmt.where(c.kind.in_([k.value for k in q.kinds]))
        if q.idempotency_key is not None:
            stmt = stmt.where(c.idempotency_key == q.idempotency_key)
        if q.approval_id is not None:
            stmt = stmt.where(c.approval_id == q.approval_id)
        return await self._fetch(stmt.order_by(c.at, c.seq).limit(q.limit))

    async def unresolved_writes(self, limit: int = 200) -> list[AuditEvent]:
        c = audit_events.c
        outcome = audit_events.alias("outcome_event")
        resolved = exists().where(
            and_(
                outcome.c.kind == EventKind.WRITE_OUTCOME.value,
                outcome.c.idempotency_key == c.idempotency_key,
                # Only a later outcome settles it: a retry sends the same key again.
                outcome.c.seq > c.seq,
                outcome.c.outcome.not_in(sorted(AMBIGUOUS_OUTCOMES)),
            )
        )
        stmt = (
            select(audit_events)
            .where(c.kind == EventKind.WRITE_PENDING.value, ~resolved)
            .order_by(c.at, c.seq)
            .limit(limit)
        )
        return await self._fetch(stmt)

    async def _fetch(self, stmt: Any) -> list[AuditEvent]:
        async with self._engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_from_row(r._mapping) for r in rows]


def _consume_failure(written: asyncio.Future[None]) -> None:
    # A cancelled caller no longer reads its row's failure: asyncio must not log it as lost.
    if not written.cancelled():
        written.exception()


def _settle(written: asyncio.Future[None], failure: Exception | None) -> None:
    if written.done():  # its caller was cancelled: the row is written (or not) all the same
        return
    if failure is None:
        written.set_result(None)
    else:
        written.set_exception(failure)


def _from_row(m: RowMapping) -> AuditEvent:
    values = {name: m[name] for name in _COLUMNS}
    values["detail"] = dict(values["detail"] or {})
    return AuditEvent(kind=EventKind(m["kind"]), **values)
