"""The answer's text while the model writes it, for people only.

The model's final answer is a structured ``FinalAnswer`` tool call, so its text arrives as
partial JSON in the streamed tool-call arguments. ``AnswerStream`` follows that one call,
reads its ``answer`` field from the partial arguments and hands the listener only new,
whole sentences: text before a sentence end (or line break) followed by more text never
changes as the model goes on, so what is shown is never taken back. Each piece passes the
same guards as the finished answer (``for_people``: no sentence meant for the model;
``unlink``: a URL no tool result of this run carried is never a link). The rest of the text,
the sources and everything else come from the checked ``Answer`` at the end.

Parsing is throttled (``MIN_CHARS`` new characters or ``MIN_SECONDS``), so a long answer
costs a few dozen parses, not one per token. A model that does not stream produces no
piece: its answer arrives in one go, as before.

Example::

    stream = AnswerStream(listener, allowed_links=lambda: {"https://t.example/PAY-1"})
    await stream.feed(chunk)        # each AIMessageChunk of the run's model calls
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.messages import AIMessageChunk
from langchain_core.utils.json import parse_partial_json
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability

from agent_core.answer import FinalAnswer
from agent_core.grounding import unlink
from agent_core.texts import for_people

log = logging.getLogger(__name__)

__all__ = ["MIN_CHARS", "MIN_SECONDS", "AnswerListener", "AnswerStream", "stream_run"]

# Told each new piece of the answer's text (already fit for people), in order.
AnswerListener = Callable[[str], Awaitable[None]]
MIN_CHARS = 64
MIN_SECONDS = 0.25
# Where text is final: after a sentence end followed by whitespace, or after a line break
# (never inside a URL, which holds no whitespace).
_CUT = re.compile(r"(?:[.!?]+[ \t]+|\n)")
_NAME = FinalAnswer.__name__
# LangGraph's key for a run's interrupts (its constant is private since 1.0).
_INTERRUPT = "__interrupt__"


class AnswerStream:
    """Follows the first ``FinalAnswer`` call streamed in one run."""

    def __init__(
        self,
        listener: AnswerListener,
        *,
        allowed_links: Callable[[], set[str]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._listener = listener
        self._allowed_links = allowed_links
        self._allowed: set[str] | None = None
        self._clock = clock
        self._names: dict[tuple[str, int], str] = {}
        self._key: tuple[str, int] | None = None
        self._args: list[str] = []
        self._length = 0
        self._parsed_length = 0
        self._parsed_at = 0.0
        self._raw_done = 0  # characters of the raw answer text already handed on
        self.sent = ""  # everything handed on, as people saw it

    async def feed(self, chunk: Any) -> None:
        """One streamed chunk of any model call of the run (others are ignored)."""
        if not isinstance(chunk, AIMessageChunk) or not chunk.tool_call_chunks:
            return
        for part in chunk.tool_call_chunks:
            key = (str(chunk.id), part.get("index") or 0)
            if part.get("name"):
                self._names[key] = str(part["name"])
            if self._names.get(key) != _NAME or (self._key not in (None, key)):
                continue
            self._key = key
            args = part.get("args") or ""
            self._args.append(args)
            self._length += len(args)
        if self._key is not None and self._due():
            await self._emit()

    def _due(self) -> bool:
        grown = self._length - self._parsed_length
        if grown <= 0:
            return False
        return grown >= MIN_CHARS or self._clock() - self._parsed_at >= MIN_SECONDS

    async def _emit(self) -> None:
        raw = "".join(self._args)
        self._args = [raw]
        self._parsed_length, self._parsed_at = self._length, self._clock()
        try:
            parsed = parse_partial_json(raw)
        except ValueError:
            return
        text = parsed.get("answer") if isinstance(parsed, dict) else None
        if not isinstance(text, str):
            return
        cut = max((m.end() for m in _CUT.finditer(text, self._raw_done)), default=0)
        if cut <= self._raw_done:
            return
        piece = text[self._raw_done : cut]
        self._raw_done = cut
        if self._allowed is None:
            self._allowed = self._allowed_links()
        shown = unlink(for_people(piece), self._allowed)
        if not shown:
            return
        if self.sent and not shown[:1].isspace() and not self.sent[-1:].isspace():
            shown = " " + shown  # for_people strips the space a dropped sentence ended with
        self.sent += shown
        try:
            await self._listener(shown)
        except Exception as exc:  # showing the text is a courtesy; the run goes on
            log.warning("answer text not delivered: %s", type(exc).__name__)


async def stream_run(
    graph: CompiledStateGraph[Any, Any, Any, Any],
    graph_input: Any,
    config: Any,
    *,
    context: Any,
    durability: Durability,
    listener: AnswerListener,
    allowed_links: Callable[[Mapping[str, Any]], set[str]],
) -> dict[str, Any]:
    """What ``graph.ainvoke`` returns (every channel in ``config``'s output keys, and the
    interrupts under ``__interrupt__``), with the model's tokens passed to an
    ``AnswerStream`` on the way (LangGraph's ``messages`` stream mode, which also makes a
    streaming-capable model stream). ``allowed_links(state)``: the URLs the state's tool
    results carried, read once, when the answer starts."""
    latest: dict[str, Any] = {}
    interrupts: list[Any] = []
    stream = AnswerStream(listener, allowed_links=lambda: allowed_links(latest))
    async for mode, payload in graph.astream(
        graph_input,
        config,
        context=context,
        durability=durability,
        output_keys=graph.stream_channels_asis,
        stream_mode=["updates", "values", "messages"],
    ):
        if mode == "messages":
            await stream.feed(payload[0])
        elif mode == "values" and isinstance(payload, dict):
            latest = payload
        elif mode == "updates" and isinstance(payload, dict) and _INTERRUPT in payload:
            interrupts.extend(payload[_INTERRUPT])
    return {**latest, _INTERRUPT: interrupts} if interrupts else latest
