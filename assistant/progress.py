"""A run's live progress in the adapters' words: ``ToolCallStarted`` / ``ToolCallFinished``
for each MCP call as it leaves opsbot and comes back (told by ``agent_core.binding``'s
interceptor, never read from model text), and the titles people see for each call.

Example::

    call_title("ticketing", "ticketing_get_ticket", {"key": "PAY-102"})
    # 'ticketing · get ticket PAY-102'
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from agent_core.binding import ToolCallEvent
from assistant.types import AnswerDelta, RunEvent, RunEvents, ToolCallFinished, ToolCallStarted

log = logging.getLogger(__name__)

TITLE_DETAIL_CHARS = 40

__all__ = ["ProgressRelay", "call_title"]


def call_title(server: str, tool: str, args: Mapping[str, Any]) -> str:
    """``"<server> · <tool in words> <first argument>"``: short, for a task list.

    ``tool`` is the prefixed name; the first plain argument (a key, an id, a query) says
    which thing the call is about. Never more than one argument: the rest may be long or
    personal, and the audit log has them."""
    server = server or tool.split("_", 1)[0]
    name = tool.removeprefix(f"{server}_").replace("_", " ")
    detail = next(
        (
            " ".join(str(v).split())
            for v in args.values()
            if isinstance(v, str | int) and not isinstance(v, bool) and str(v).strip()
        ),
        "",
    )
    if len(detail) > TITLE_DETAIL_CHARS:
        detail = detail[: TITLE_DETAIL_CHARS - 1] + "…"
    return f"{server} · {name} {detail}".strip()


class ProgressRelay:
    """Turns the run's tool-call notices into ``RunEvent``s for the adapter (if it listens),
    and keeps the titles of calls started and skipped (what a Stop reply says)."""

    def __init__(self, events: RunEvents | None) -> None:
        self._events = events
        self.started: list[str] = []
        self.not_started: list[str] = []
        self.shown = ""  # the answer's text streamed so far

    async def emit(self, event: RunEvent) -> None:
        if self._events is None:
            return
        try:
            await self._events(event)
        except Exception as exc:  # the adapter's display never fails the run
            log.warning("run event not delivered: %s", type(exc).__name__)

    async def tool_call_started(self, event: ToolCallEvent) -> None:
        title = call_title(event.server, event.tool, event.args)
        self.started.append(title)
        await self.emit(ToolCallStarted(event.tool_call_id, event.server, event.tool, title))

    async def tool_call_finished(
        self, event: ToolCallEvent, outcome: str, latency_ms: float
    ) -> None:
        ok = outcome == "success"
        await self.emit(ToolCallFinished(event.tool_call_id, ok, None if ok else event.reason))

    async def tool_call_skipped(self, tool: str, args: Mapping[str, Any]) -> None:
        self.not_started.append(call_title("", tool, args))

    @property
    def listening(self) -> bool:
        """Whether an adapter listens (then the answer's text is worth streaming)."""
        return self._events is not None

    async def answer_text(self, text: str) -> None:
        """More of the answer's text (``agent_core.answer_stream``), as an ``AnswerDelta``."""
        self.shown += text
        await self.emit(AnswerDelta(text, self.shown))
