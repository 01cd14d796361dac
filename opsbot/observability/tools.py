"""Tool-call metrics as an ``agent_core.ToolObserver``, and a way to chain observers.

Example::

    agent = Agent(..., observer=ObserverChain(AuditObserver(audit), ToolMetrics()))
"""

from __future__ import annotations

from collections import OrderedDict

from agent_core.binding import ToolCallEvent, ToolObserver
from infra.observability import metrics as m

_SEEN_LIMIT = 10_000


class ToolMetrics:
    """Counts calls, errors, latency and retries per MCP server.

    A retry is a second attempt at the same tool call (same thread, call id and approval):
    the read-retry middleware, or the one re-try after a refused token.
    """

    def __init__(self) -> None:
        self._seen: OrderedDict[tuple[str, str, str | None], None] = OrderedDict()

    async def tool_call_started(self, event: ToolCallEvent) -> None:
        key = (event.thread_id, event.tool_call_id, event.approval_id)
        if key in self._seen:
            m.TOOL_RETRIES.labels(server=event.server).inc()
            self._seen.move_to_end(key)
            return
        self._seen[key] = None
        while len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)

    async def tool_call_finished(
        self, event: ToolCallEvent, outcome: str, latency_ms: float
    ) -> None:
        label = "success" if outcome == "success" else "error"
        m.TOOL_CALLS.labels(server=event.server, kind=event.kind, outcome=label).inc()
        m.TOOL_SECONDS.labels(server=event.server).observe(latency_ms / 1000)
        if outcome != "success":
            error = outcome.split(":", 1)[1] if ":" in outcome else outcome
            m.TOOL_ERRORS.labels(server=event.server, error=error).inc()


class ObserverChain:
    """Tells each observer in order; one failing observer does not silence the others."""

    def __init__(self, *observers: ToolObserver) -> None:
        self._observers = observers

    async def tool_call_started(self, event: ToolCallEvent) -> None:
        for observer in self._observers:
            await observer.tool_call_started(event)

    async def tool_call_finished(
        self, event: ToolCallEvent, outcome: str, latency_ms: float
    ) -> None:
        for observer in self._observers:
            await observer.tool_call_finished(event, outcome, latency_ms)
