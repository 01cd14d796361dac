"""Slack's agent features: a streamed answer with one task per tool call, and session status.

``LiveAnswer`` streams one answer (``chat.startStream`` / ``appendStream`` / ``stopStream``):
a ``task_update`` chunk per MCP call as the core reports it (``in_progress`` → ``complete``
or ``error``; a write waiting for an approver stays ``pending``), then the answer's text as
the model writes it (a ``markdown_text`` chunk per ``AnswerDelta``; the rest at the end), and
at the end its sources, caveats and the feedback buttons. Streamed text is shown as the core
checked it: a link only where a tool result of the run carried its URL (the sources are not
known before the end); an answer that arrives in one piece links only to its sources.
The runs happen outside Bolt's listeners (durable jobs), where Bolt's ``say_stream`` is not
available, so the Web API methods are called directly. If Slack refuses a method
(``unknown_method``, ``not_allowed``, ...), the adapter falls back to the placeholder
message replaced by the answer.

``AgentSessions`` sets ``agents.sessions.setStatus`` (``processing`` while a run works,
``suspended`` while it waits on an approval, ``active`` or ``closed`` afterwards). A
workspace that refuses it is not asked again by this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.core import (
    Answer,
    AnswerDelta,
    RunEvent,
    ToolCallAwaitingApproval,
    ToolCallFinished,
    ToolCallStarted,
    unshown,
)
from bot.slack.render import Block, bullet_lines, context, escape, sections, source_link, split_text

log = logging.getLogger(__name__)

FEEDBACK_ACTION_ID = "answer_feedback"
FEEDBACK_BLOCK_ID = "answer_feedback"
POSITIVE, NEGATIVE = "positive", "negative"
STREAM_TEXT_LIMIT = 12_000  # characters of markdown_text per call
# Errors meaning "this workspace (or token) has no such feature": not asked again.
UNAVAILABLE = frozenset(
    {
        "unknown_method",
        "not_allowed",
        "not_allowed_token_type",
        "missing_scope",
        "feature_not_enabled",
        "method_deprecated",
        "not_implemented",
    }
)
_MD_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_Failure = (SlackApiError, aiohttp.ClientError, TimeoutError)


def _error(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or "error")
    return type(exc).__name__


def markdown_text(answer: Answer) -> str:
    """The answer for ``markdown_text``: Slack's control characters escaped; a link only
    where a source carried its URL (a model-written URL keeps just its label)."""
    allowed = {s.link for s in answer.sources if s.link}
    text = escape(answer.answer or "")
    return _MD_LINK.sub(
        lambda m: m.group(0) if m.group(2).replace("&amp;", "&") in allowed else m.group(1), text
    )


def _text_size(chunk: dict[str, Any]) -> int:
    return len(chunk.get("text") or "") if chunk["type"] == "markdown_text" else 0


def _pieces(text: str) -> list[str]:
    """``text`` in pieces Slack accepts, whitespace kept (they join into the same text)."""
    return [text[i : i + STREAM_TEXT_LIMIT] for i in range(0, len(text), STREAM_TEXT_LIMIT)]


def feedback_block() -> Block:
    """Thumbs up / down under an answer (``context_actions`` with ``feedback_buttons``)."""
    return {
        "type": "context_actions",
        "block_id": FEEDBACK_BLOCK_ID,
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION_ID,
                "positive_button": {
                    "text": {"type": "plain_text", "text": "Good answer"},
                    "accessibility_label": "This answer was helpful",
                    "value": POSITIVE,
                },
                "negative_button": {
                    "text": {"type": "plain_text", "text": "Bad answer"},
                    "accessibility_label": "This answer was not helpful",
                    "value": NEGATIVE,
                },
            }
        ],
    }


def closing_blocks(answer: Answer) -> list[Block]:
    """What ends a streamed answer: its sources, actions and caveats, then feedback."""
    blocks: list[Block] = []
    if answer.sources:
        blocks += sections("*Sources*\n" + bullet_lines(source_link(s) for s in answer.sources))
    if answer.actions_taken:
        blocks += sections(
            "*Actions taken*\n" + bullet_lines(escape(a) for a in answer.actions_taken)
        )
    blocks += [context(f":warning: {escape(caveat)}") for caveat in answer.caveats]
    return [*blocks[:49], feedback_block()]


@dataclass(eq=False)
class LiveAnswer:
    """One streamed answer in ``channel``'s thread ``thread_ts``, for ``user`` of ``team``.

    ``start`` opens the stream (``False``: Slack refused; use the placeholder instead).
    ``event`` queues a task update; a writer sends them in order, batched, so a slow Slack
    never slows the run. ``finish`` sends the text and closes the stream (``False`` if the
    stream broke on the way: the caller posts the reply as ordinary messages)."""

    client: AsyncWebClient
    channel: str
    thread_ts: str
    team: str
    user: str
    approvals_channel: str
    ts: str | None = None
    broken: bool = field(default=False, init=False)
    # The workspace refused the feature itself.
    unavailable: bool = field(default=False, init=False)
    # The answer's text streamed so far (the core's, before escaping).
    shown: str = field(default="", init=False)
    _titles: dict[str, str] = field(default_factory=dict, init=False)
    _queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue, init=False)
    _writer: asyncio.Task[None] | None = field(default=None, init=False)

    async def start(self) -> bool:
        try:
            response = await self.client.chat_startStream(
                channel=self.channel,
                thread_ts=self.thread_ts,
                recipient_team_id=self.team,
                recipient_user_id=self.user,
                task_display_mode="timeline",
            )
        except _Failure as exc:
            error = _error(exc)
            self.unavailable = error in UNAVAILABLE
            log.info("streaming unavailable (%s): using a placeholder message", error)
            return False
        if not response.get("ts"):
            log.warning("chat.startStream answered without a ts: using a placeholder message")
            return False
        self.channel = str(response.get("channel") or self.channel)
        self.ts = str(response["ts"])
        return True

    async def event(self, event: RunEvent) -> None:
        if isinstance(event, AnswerDelta):
            self.shown = event.so_far
            for piece in _pieces(escape(event.text)):
                self._queue.put_nowait({"type": "markdown_text", "text": piece})
        else:
            self._queue.put_nowait(self._task_chunk(event))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())

    def answer_markdown(self, answer: Answer) -> str:
        """What is left to show of ``answer``'s text: all of it (``markdown_text``) when
        nothing was streamed, else the part the stream did not show yet."""
        if not self.shown:
            return markdown_text(answer)
        return escape(unshown(answer.answer or "", self.shown))

    def after_shown(self, text: str) -> str:
        """``text`` (a refusal, a Stop) set apart from answer text already streamed."""
        return f"\n\n{text}" if self.shown else text

    def _task_chunk(
        self, event: ToolCallStarted | ToolCallFinished | ToolCallAwaitingApproval
    ) -> dict[str, Any]:
        if isinstance(event, ToolCallStarted):
            self._titles[event.call_id] = event.title
            return _task(event.call_id, event.title, "in_progress")
        if isinstance(event, ToolCallAwaitingApproval):
            self._titles[event.call_id] = event.title
            note = f"awaiting approval in #{self.approvals_channel}"
            return _task(event.call_id, event.title, "pending", note)
        title = self._titles.get(event.call_id, "tool call")
        if not event.ok:
            return _task(event.call_id, title, "error", event.error or "failed")
        return _task(event.call_id, title, "complete")

    async def _write(self) -> None:
        carry: dict[str, Any] | None = None  # the chunk that did not fit in the last call
        while True:
            batch = [carry if carry is not None else await self._queue.get()]
            carry = None
            size = _text_size(batch[0])
            while not self._queue.empty():
                chunk = self._queue.get_nowait()
                if size + _text_size(chunk) > STREAM_TEXT_LIMIT:  # Slack's limit per call
                    carry = chunk
                    break
                batch.append(chunk)
                size += _text_size(chunk)
            try:
                await self._append(chunks=batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _append(self, **fields: Any) -> None:
        if self.broken or self.ts is None:
            return
        try:
            await self.client.chat_appendStream(channel=self.channel, ts=self.ts, **fields)
        except Exception as exc:  # a display failure never fails the run: post instead
            self.broken = True
            log.warning("stream broke (%s): the reply is posted as a message", _error(exc))

    async def finish(self, markdown: str = "", blocks: list[Block] | None = None) -> bool:
        """Send the remaining task updates, ``markdown`` and close with ``blocks``."""
        await self._queue.join()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        if not markdown.strip():
            parts = []
        elif self.shown:  # continues the streamed text: its spacing is kept as it is
            parts = _pieces(markdown)
        else:
            parts = split_text(markdown, STREAM_TEXT_LIMIT)
        for part in parts[:-1]:
            await self._append(markdown_text=part)
        if self.broken or self.ts is None:
            return False
        try:
            await self.client.chat_stopStream(
                channel=self.channel,
                ts=self.ts,
                markdown_text=parts[-1] if parts else None,
                blocks=blocks or None,
            )
        except _Failure as exc:
            self.broken = True
            log.warning("could not finish the stream (%s): posting the reply", _error(exc))
            return False
        return True


def _task(call_id: str, title: str, status: str, details: str | None = None) -> dict[str, Any]:
    chunk = {"type": "task_update", "id": call_id, "title": title[:256], "status": status}
    if details:
        chunk["details"] = details[:500]
    return chunk


class AgentSessions:
    """``agents.sessions.setStatus`` for a conversation; a refusing workspace is left alone."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self.available = True

    async def set_status(self, channel: str, thread_ts: str, status: str) -> None:
        if not self.available:
            return
        try:
            await self.client.agents_sessions_setStatus(
                channel_id=channel, thread_ts=thread_ts, status=status
            )
        except _Failure as exc:
            error = _error(exc)
            if error in UNAVAILABLE:
                self.available = False
            log.info("agent session status %s not set: %s", status, error)


__all__ = [
    "FEEDBACK_ACTION_ID",
    "AgentSessions",
    "LiveAnswer",
    "closing_blocks",
    "feedback_block",
    "markdown_text",
]
