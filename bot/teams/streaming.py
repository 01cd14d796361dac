"""Streaming an answer in a Teams personal chat (Teams streams only in 1:1 chats).

The wire protocol (the Agents SDK's ``StreamingResponse`` sends the same shapes):

- **informative**: a ``typing`` activity with ``text`` ("Working on it…", then the tool
  being called) and a ``streaminfo`` entity ``{"streamType": "informative",
  "streamSequence": n}``. Teams answers the first one with the stream's id;
- **streaming**: a ``typing`` activity whose ``text`` is *all* the answer written so far,
  ``streaminfo`` ``{"streamId", "streamType": "streaming", "streamSequence": n}``;
- **final**: a ``message`` with the whole answer and its Adaptive Card (sources, caveats),
  ``streaminfo`` ``{"streamId", "streamType": "final"}`` and no sequence number.

``streamSequence`` grows by one with each request. Teams throttles streams (the SDK waits 1 s
between requests on Teams): updates are coalesced and sent at most once per
``every_seconds``, the latest state only. A refused start (streaming not enabled, an error)
leaves the caller on typing indicators and a plain reply; a stream that breaks later is
ended by the plain reply (``finish`` returns ``False``).

Example::

    stream = TeamsStream(send, "Working on it…")
    await stream.event(ToolCallStarted(...))   # the first event opens the stream
    await stream.event(AnswerDelta(...))
    if not (stream.started and await stream.finish(final_activity)):
        ...                                    # post the reply as usual
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from bot.teams.core import AnswerDelta, RunEvent, ToolCallStarted
from bot.teams.render import stream_text

log = logging.getLogger(__name__)

__all__ = ["STREAM_INFO", "TeamsStream"]

STREAM_INFO = "streaminfo"
# Posts activities in the conversation; the new activities' ids.
Send = Callable[[list[dict[str, Any]]], Awaitable[list[str]]]


def _typing(text: str, info: dict[str, Any]) -> dict[str, Any]:
    return {"type": "typing", "text": text, "entities": [{"type": STREAM_INFO, **info}]}


class TeamsStream:
    """One streamed reply in a personal chat."""

    def __init__(self, send: Send, working_text: str, *, every_seconds: float = 1.0) -> None:
        # Held while a plain typing indicator is sent and while the stream opens: no typing
        # activity ever lands inside the stream.
        self.gate = asyncio.Lock()
        self._send = send
        self._working_text = working_text
        self._every = every_seconds
        self.stream_id: str | None = None
        self.broken = False
        self._refused = False
        self.shown = ""  # the answer's text streamed so far
        self._sequence = 0
        self._pending: tuple[str, str] | None = None  # (stream type, text) not sent yet
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._posting = asyncio.Lock()  # held while a request is out: never cut one short
        self._last = 0.0  # loop time of the last request

    async def start(self) -> bool:
        """The first informative update; ``False`` if Teams refused it (no streaming)."""
        async with self.gate:
            try:
                ids = await self._post("informative", self._working_text)
            except Exception as exc:
                log.info("Teams streaming unavailable (%s): typing instead", type(exc).__name__)
                return False
            if not ids or not ids[0]:
                return False
            self.stream_id = ids[0]
        self._writer = asyncio.create_task(self._write())
        return True

    @property
    def started(self) -> bool:
        return self.stream_id is not None

    async def event(self, event: RunEvent) -> None:
        """A tool call (an informative update, while no answer text shows) or more text.
        The first one opens the stream: a reply that needs no work (a sign-in card, a
        refusal) is never streamed."""
        if not self.started and (self._refused or not await self.start()):
            self._refused = True
            return
        if isinstance(event, AnswerDelta):
            self.shown = event.so_far
            self._pending = ("streaming", stream_text(event.so_far))
        elif isinstance(event, ToolCallStarted) and not self.shown:
            self._pending = ("informative", f"Working on it: {event.title}…")
        else:
            return
        self._wake.set()

    async def _post(self, kind: str, text: str) -> list[str]:
        self._sequence += 1
        info: dict[str, Any] = {"streamType": kind, "streamSequence": self._sequence}
        if self.stream_id is not None:
            info["streamId"] = self.stream_id
        try:
            return await self._send([_typing(text, info)])
        finally:
            self._last = asyncio.get_running_loop().time()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, None
            if pending is None:
                continue
            async with self._posting:
                try:
                    await self._post(*pending)
                except Exception as exc:  # the display never fails the run; the reply follows
                    self.broken = True
                    log.warning("Teams stream broke (%s): the reply is posted", type(exc).__name__)
                    return
            await asyncio.sleep(self._every)  # Teams' pace for stream updates

    async def finish(self, final: dict[str, Any]) -> bool:
        """End the stream with ``final`` (a ``message`` activity); ``False`` if the stream
        broke (post the reply as usual). Updates not sent yet are dropped: ``final`` has
        everything."""
        if self._writer is not None:
            async with self._posting:  # a request in flight completes first
                self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        if self.broken or self.stream_id is None:
            return False
        wait = self._last + self._every - asyncio.get_running_loop().time()
        if wait > 0:
            await asyncio.sleep(wait)
        info = {"type": STREAM_INFO, "streamId": self.stream_id, "streamType": "final"}
        activity = {**final, "entities": [*final.get("entities", []), info]}
        try:
            await self._send([activity])
        except Exception as exc:
            log.warning(
                "could not end the Teams stream (%s): posting the reply", type(exc).__name__
            )
            self.broken = True
            return False
        return True
