"""The ack path on its own: a user's message is stored and acknowledged on a thread, an event
loop and database connections that no agent run ever holds.

``serve_http(..., front=AckFront(adapter, url))`` serves Slack's HTTP on the ``slack-ack``
loop (``infra.loop_thread``). For an Events API message (a mention or a DM) this module does
on that loop what the team, accept and dedup middleware do on the main loop: check the team,
store the message as a queued job and its ``event_id`` as processed (``infra.jobs.JobInbox``,
on the front's own small pool), answer 200 and wake this instance's worker. Everything else
(commands, clicks, modals, App Home, a message too long, before ``auth.test`` has answered)
goes to Bolt on the main loop, as before.

Why: the main loop runs the agents; a loop busy with 50 agent steps delayed each ``await`` of
an ack by all of them (acks of 0.6–1.7 s), and on a shared pool the ack waited for a
connection an agent held.

Example::

    front = AckFront(adapter, settings.resolved_database_url, pool_size=2)
    async with serve_http(app, sock, front=front) as url:
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiohttp import web

from bot.front import AckFrontBase
from bot.slack.durable import DurableSlackAdapter, message_job
from bot.slack.incoming import user_message
from bot.slack.listeners import title_thread
from infra.ack import not_stored
from infra.clock import Clock, utc_now

log = logging.getLogger(__name__)

ACK_LOOP = "ack"


class AckFront(AckFrontBase):
    """What the ``slack-ack`` loop needs to accept a message without the main loop."""

    def __init__(
        self,
        adapter: DurableSlackAdapter,
        database_url: str,
        *,
        pool_size: int = 2,
        clock: Clock = utc_now,
    ) -> None:
        super().__init__(database_url, pool_size, clock)
        self._adapter = adapter

    @contextlib.asynccontextmanager
    async def opened(self, main: asyncio.AbstractEventLoop) -> AsyncIterator[AckFront]:
        """Open the front's engine, inbox and lag monitor on the running (ack) loop."""
        async with self._opened_on(main, ACK_LOOP):
            yield self

    async def try_accept(self, body: Mapping[str, Any]) -> web.Response | None:
        """Accept an Events API message here and answer Slack; ``None``: Bolt's to handle."""
        message = user_message(body)
        adapter = self._adapter
        if message is None or self._inbox is None or adapter.home_team is None:
            return None
        if not adapter.event_served(body):
            return web.Response(status=200, text="")
        if len(message.text) > adapter.config.max_message_chars:
            return None  # refused by the listener, after the ack, with a private note
        event_id = str(body.get("event_id") or "")
        try:
            first = await self._inbox.put(message_job(message, event_id))
        except Exception as exc:
            # Nothing was stored or marked seen: Slack delivers it again.
            return not_stored(exc, event_id, platform="Slack")
        if not first:
            log.info("redelivery of %s dropped", event_id)
            return web.Response(status=200, text="")
        self.accepted += 1
        self._wake_worker(adapter.runner)
        if self._main is not None and message.is_dm and not body["event"].get("thread_ts"):
            # A new conversation in the Messages tab gets its title as on Bolt's path; on
            # the main loop, where the adapter's Web API client lives (best effort).
            asyncio.run_coroutine_threadsafe(title_thread(adapter, message), self._main)
        return web.Response(status=200, text="")
