"""Reconciling ambiguous writes: pending audit records with no outcome.

A crash (or a timeout) between a write reaching the server and its outcome being recorded
leaves a ``write_pending`` record alone. The reconciler asks the server's own change log
about that record's idempotency key and appends the outcome it finds; what it cannot settle
(server unreachable, no change log, the requester's access gone) is reported as ambiguous.

Example::

    report = await Reconciler(log, McpChangeLog(urls, token_for)).run()
    for event, reason in report.ambiguous: ...
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from audit.log import AuditEvent, AuditLog
from infra.clock import Clock, utc_now
from infra.mcp_session import mcp_session


@dataclass(frozen=True, slots=True)
class Applied:
    """The server made the change: ``change_ids`` from its log."""

    change_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NotApplied:
    """The server's log has no change with this key: the write never happened."""


@dataclass(frozen=True, slots=True)
class Unknown:
    reason: str


Lookup = Applied | NotApplied | Unknown


class ChangeLogSource(Protocol):
    async def lookup(self, pending: AuditEvent) -> Lookup: ...


@dataclass
class ReconcileReport:
    resolved: list[tuple[AuditEvent, str]] = field(default_factory=list)
    ambiguous: list[tuple[AuditEvent, str]] = field(default_factory=list)
    too_recent: list[AuditEvent] = field(default_factory=list)


class Reconciler:
    """Settles pending writes from the servers' change logs; never touches a settled one."""

    def __init__(
        self,
        log: AuditLog,
        source: ChangeLogSource,
        *,
        clock: Clock = utc_now,
        grace: timedelta = timedelta(minutes=2),
    ) -> None:
        self._log = log
        self._source = source
        self._clock = clock
        self._grace = grace

    async def run(self, limit: int = 200) -> ReconcileReport:
        report = ReconcileReport()
        cutoff = self._clock() - self._grace
        for pending in await self._log.unresolved_writes(limit):
            if pending.at > cutoff:  # may still be in flight
                report.too_recent.append(pending)
                continue
            try:
                found = await self._source.lookup(pending)
            except Exception as exc:  # a lookup failure leaves it ambiguous, never settled
                found = Unknown(f"lookup failed ({type(exc).__name__})")
            match found:
                case Applied(change_ids=ids):
                    await self._log.write_outcome(
                        pending,
                        outcome="success",
                        detail={"resolved_by": "reconcile", "change_ids": list(ids)},
                    )
                    report.resolved.append((pending, "success"))
                case NotApplied():
                    await self._log.write_outcome(
                        pending, outcome="not_applied", detail={"resolved_by": "reconcile"}
                    )
                    report.resolved.append((pending, "not_applied"))
                case Unknown(reason=reason):
                    report.ambiguous.append((pending, reason))
        return report


TokenFor = Callable[[str, str], Awaitable[str]]
"""``(requester_subject, server) -> bearer token`` for reading that server's change log."""


class McpChangeLog:
    """Looks keys up with the servers' ``get_change_log`` tool over MCP, as the requester."""

    def __init__(
        self, urls: Mapping[str, str], token_for: TokenFor, *, tool: str = "get_change_log"
    ) -> None:
        self._urls = dict(urls)
        self._token_for = token_for
        self._tool = tool

    async def lookup(self, pending: AuditEvent) -> Lookup:
        server = (pending.tool or "").split("_", 1)[0]
        url = self._urls.get(server)
        if url is None:
            return Unknown(f"no change log is known for server {server!r}")
        if not pending.requester or not pending.idempotency_key:
            return Unknown("the pending record names no requester or idempotency key")
        try:
            token = await self._token_for(pending.requester, server)
        except Exception as exc:
            return Unknown(f"no token to read {server}'s change log ({type(exc).__name__})")
        async with mcp_session(url, token) as session:
            result = await session.call_tool(
                self._tool, {"idempotency_key": pending.idempotency_key}
            )
        if result.isError:
            return Unknown(f"{server} refused the change-log read")
        entries = _entries(result.structuredContent, result.content)
        if not entries:
            return NotApplied()
        return Applied(tuple(str(e.get("id")) for e in entries))


def _entries(structured: Any, content: Any) -> list[dict[str, Any]]:
    data = structured
    if data is None and content:
        text = getattr(content[0], "text", "")
        data = json.loads(text) if text else {}
    if isinstance(data, dict) and "result" in data and "entries" not in data:
        data = data["result"]
    entries = data.get("entries", []) if isinstance(data, dict) else []
    return [e for e in entries if isinstance(e, dict)]
