"""Teams on the ack path: ``POST /api/messages`` is authenticated, deduplicated and stored on
the ack thread's loop, on connections no agent run holds (``infra.jobs.JobInbox``; on SQLite
its spool file), exactly like Slack's (``bot.slack.front``).

On that loop: the size cap, the Bot Connector JWT and the activity's binding to it
(``bot.teams.auth``, with a key cache and HTTP session of the front's own), then, for a
person's message, the job and its delivery id (activity id + conversation id) in one
transaction, the 202 and a wake-up for this instance's worker on the main loop. Everything
else (``adaptiveCard/action`` invokes that need their card in the answer, sign-in, card
submits, conversation updates, a "stop") is handed to the Agents SDK on the main loop, where the
adapter's clients live; the ack loop awaits that answer without blocking other requests.

Why: a 202 that waited for the main loop waited for every agent step queued on it (Teams
p99 4.9 s under load), and one that waited for the agents' database writer lock waited for
their checkpoints.

Example::

    front = TeamsAckFront(bot, database_url, lag_loop="teams-ack")
    async with serve_fronts(sock, [front], routes=ops_routes) as url:   # infra.ack
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from microsoft_agents.activity import Activity

from bot.front import AckFrontBase
from bot.teams.adapter import is_stop
from bot.teams.app import TeamsBot, message_from
from bot.teams.auth import ConnectorAuth
from bot.teams.durable import JOB_KIND, DurableTeamsAdapter
from bot.teams.server import MESSAGES_PATH, authenticate, process_with_sdk
from infra.ack import not_stored
from infra.clock import Clock, utc_now
from infra.jobs import Delivery
from infra.loop_thread import on_loop

log = logging.getLogger(__name__)

TEAMS_ACK_LOOP = "teams-ack"


class TeamsAckFront(AckFrontBase):
    """What the ack loop needs to accept a Teams message without the main loop.

    ``lag_loop`` names the loop in ``opsbot_event_loop_lag_seconds``; ``None`` when the loop
    is shared with Slack's front (``opsbot serve``), whose monitor already samples it."""

    def __init__(
        self,
        bot: TeamsBot,
        database_url: str,
        *,
        pool_size: int = 2,
        lag_loop: str | None = TEAMS_ACK_LOOP,
        clock: Clock = utc_now,
    ) -> None:
        if not isinstance(bot.adapter, DurableTeamsAdapter):
            raise TypeError("the Teams ack front stores jobs: it needs durable runs")
        super().__init__(database_url, pool_size, clock)
        self._bot = bot
        self._adapter = bot.adapter
        self._lag_loop = lag_loop
        self._auth: ConnectorAuth | None = None

    @contextlib.asynccontextmanager
    async def opened(self, main: asyncio.AbstractEventLoop) -> AsyncIterator[TeamsAckFront]:
        """Open the front's engine, inbox, key cache and lag monitor on the running loop."""
        async with aiohttp.ClientSession() as session, self._opened_on(main, self._lag_loop):
            self._auth = ConnectorAuth(self._bot.config.auth_config(), session)
            try:
                yield self
            finally:
                self._auth = None

    def routes(self) -> list[web.RouteDef]:
        return [web.post(MESSAGES_PATH, self.messages)]

    async def messages(self, request: web.Request) -> web.StreamResponse:
        if self._auth is None or self._main is None:
            return web.Response(status=503, text="starting")
        checked = await authenticate(request, self._auth, self._bot.config.max_body_bytes)
        if isinstance(checked, web.Response):
            return checked
        claims, activity = checked
        accepted = await self._try_accept(activity)
        if accepted is not None:
            return accepted
        # Invokes and the rest: the SDK on the main loop; only this request waits for it.
        answer = await on_loop(self._main, process_with_sdk(self._bot, request, claims))
        return answer

    async def _try_accept(self, activity: Mapping[str, Any]) -> web.Response | None:
        """Store a person's message and answer 202; ``None``: the SDK's to handle."""
        if activity.get("type") != "message" or activity.get("value") is not None:
            return None  # a card submit carries a value: the SDK's route
        try:
            parsed = Activity.model_validate(activity)
            if parsed.text is not None:
                parsed.text = parsed.remove_recipient_mention()  # as the SDK's app does
            # Its conversation reference validates again: a message without a recipient
            # fails only there (pydantic's ValidationError is a ValueError), and was a 500
            # with a traceback.
            message = message_from(parsed)
        except ValueError:
            return None  # the SDK's path answers it (a clear 400 for a shape it refuses)
        if message is None or self._inbox is None:
            return None
        if is_stop(message.text):
            # Not a job: a stop queued behind the run it stops would wait for that run (the
            # adapter handles it at once on the main loop, as Slack's agent_session_stopped).
            return None
        delivery = Delivery(
            f"teams-{message.delivery_id}",
            JOB_KIND,
            message.user_key,
            {"message": message.to_payload()},
            event_id=message.delivery_id,
            platform="teams",
        )
        try:
            first = await self._inbox.put(delivery)
        except Exception as exc:
            # Nothing was stored or marked seen: Teams delivers it again.
            return not_stored(exc, message.delivery_id, platform="Teams")
        if not first:
            log.info("duplicate Teams delivery dropped")
            return web.Response(status=202)
        self.accepted += 1
        self._wake_worker(self._adapter.runner)
        return web.Response(status=202)
