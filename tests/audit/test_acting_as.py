"""Calls to ``static`` / ``none`` MCP servers are audited as the service (issue 19)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from agent_core.binding import ActingAs, ToolCallEvent
from audit import AuditLog, AuditObserver, EventKind, MemoryAuditSink


def event(kind: str, acting_as: ActingAs) -> ToolCallEvent:
    return ToolCallEvent(
        requester="alice",
        thread_id="th-1",
        tool="grafana_query",
        server="grafana",
        kind="write" if kind == "write" else "read",
        tool_call_id="call-1",
        args={"q": "up"},
        idempotency_key=None,
        approval_id=None,
        acting_as=acting_as,
    )


@pytest.mark.parametrize("kind", ["read", "write"])
@pytest.mark.parametrize(
    ("acting_as", "detail"),
    [
        ("user", {}),
        ("service", {"acting_as": "service"}),
        ("anonymous", {"acting_as": "anonymous"}),
    ],
)
async def test_the_record_says_whose_credential_the_server_saw(
    kind: str, acting_as: ActingAs, detail: dict[str, str]
) -> None:
    sink = MemoryAuditSink()
    ids = itertools.count()
    observer = AuditObserver(
        AuditLog(
            sink, clock=lambda: datetime(2026, 12, 1, tzinfo=UTC), new_id=lambda: f"{next(ids)}"
        )
    )
    call = event(kind, acting_as)
    await observer.tool_call_started(call)
    await observer.tool_call_finished(call, "success", 3.0)

    first = sink.events[0]
    assert first.kind == (EventKind.WRITE_PENDING if kind == "write" else EventKind.TOOL_CALL)
    assert first.requester == "alice"  # still on whose behalf it ran
    assert first.detail == detail
