"""The agent core's ``ToolObserver`` that writes the audit trail of every tool call.

A write gets a ``write_pending`` record *before* it leaves the process and a
``write_outcome`` record after (append-only, joined by the idempotency key); a read gets one
``tool_call`` record when it finishes. Arguments are redacted by the log; outputs never logged.

Example::

    agent = Agent(config, ..., observer=AuditObserver(AuditLog(SqlAuditSink(engine))))
"""

from __future__ import annotations

import asyncio

from agent_core.binding import ToolCallEvent
from audit.log import AuditEvent, AuditLog


def write_key(idempotency_key: str | None, tool_call_id: str) -> str:
    """The key a write's audit records are joined by: its idempotency key, or for a call
    sent without one, ``nokey:<tool call id>``."""
    return idempotency_key or f"nokey:{tool_call_id}"


class AuditObserver:
    """Records each tool call of every run in the audit log."""

    def __init__(self, log: AuditLog) -> None:
        self._log = log
        self._pending: dict[tuple[str, str, str | None], AuditEvent] = {}
        self._lock = asyncio.Lock()

    async def tool_call_started(self, event: ToolCallEvent) -> None:
        if event.kind != "write":
            return
        pending = await self._log.write_pending(
            requester=event.requester,
            thread_id=event.thread_id,
            tool=event.tool,
            args=dict(event.args),
            idempotency_key=write_key(event.idempotency_key, event.tool_call_id),
            approval_id=event.approval_id,
            model_used=event.model or None,
            detail=_acting(event),
        )
        async with self._lock:
            self._pending[_key(event)] = pending

    async def tool_call_finished(
        self, event: ToolCallEvent, outcome: str, latency_ms: float
    ) -> None:
        if event.kind != "write":
            await self._log.tool_call(
                requester=event.requester,
                thread_id=event.thread_id,
                tool=event.tool,
                args=dict(event.args),
                outcome=outcome,
                latency_ms=latency_ms,
                model_used=event.model or None,
                detail=_acting(event),
            )
            return
        async with self._lock:
            pending = self._pending.pop(_key(event), None)
        if pending is not None:
            detail = {"reason": event.reason} if event.reason and outcome != "success" else None
            await self._log.write_outcome(
                pending, outcome=outcome, latency_ms=latency_ms, detail=detail
            )


def _acting(event: ToolCallEvent) -> dict[str, str] | None:
    # Calls to ``static`` / ``none`` servers ran as opsbot's service identity (or as nobody),
    # not as the requester: the record says so.
    return None if event.acting_as == "user" else {"acting_as": event.acting_as}


def _key(event: ToolCallEvent) -> tuple[str, str, str | None]:
    return (event.thread_id, event.tool_call_id, event.idempotency_key)
