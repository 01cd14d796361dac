"""Durable conversations: an accepted Slack message becomes a job any instance runs.

``DurableSlackAdapter`` replaces the in-process run of ``SlackAdapter.converse`` with
"post the working indicator, enqueue a job" (both before Bolt's listener returns); a
``JobRunner`` on any instance then runs the job with ``run_job``. The indicator's ``ts`` is
in the job, so a run retried after a crash replaces the same placeholder: one answer per
message, however many attempts it took.

Example::

    adapter = DurableSlackAdapter(config, assistant, client, messages, SqlJobQueue(engine))
    app = build_app(config, assistant, engine, client=client, adapter=adapter)
    async with JobRunner(adapter.queue, adapter.run_job, limits) as runner:
        adapter.runner = runner
        ...
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core.clock import Clock, utc_now
from bot.slack.adapter import FAILURE_TEXT, Indicator, SlackAdapter
from bot.slack.app import SlackBot, build_app
from bot.slack.client import make_web_client
from bot.slack.config import SlackBotConfig
from bot.slack.core import AssistantPort, ChatUser, PlatformRef
from bot.slack.render import text_message
from bot.slack.store import SqlApprovalMessages
from opsbot.jobs import Job, JobRunner, RunLimits, SqlJobQueue

log = logging.getLogger(__name__)
JOB_KIND = "slack_message"


class DurableSlackAdapter(SlackAdapter):
    def __init__(
        self,
        config: SlackBotConfig,
        assistant: AssistantPort,
        client: AsyncWebClient,
        approval_messages: SqlApprovalMessages,
        queue: SqlJobQueue,
    ) -> None:
        super().__init__(config, assistant, client, approval_messages)
        self.queue = queue
        self.runner: JobRunner | None = None

    async def converse(
        self,
        chat_user: ChatUser,
        team_id: str,
        channel: str,
        thread_ts: str,
        text: str,
        *,
        is_dm: bool,
    ) -> None:
        """Accept the message: show that it is being worked on, then persist it as a job."""
        indicator = await self.start_working(channel, thread_ts, is_dm)
        payload: dict[str, Any] = {
            "platform": chat_user.platform,
            "user_team": chat_user.team_id,
            "user": chat_user.user_id,
            "team": team_id,
            "channel": channel,
            "thread_ts": thread_ts,
            "text": text,
            "placeholder_ts": indicator.placeholder_ts,
            "status_set": indicator.status_set,
        }
        user_key = f"{chat_user.platform}:{chat_user.team_id}:{chat_user.user_id}"
        # Slack's redeliveries were dropped by the dedup middleware already; a fresh id.
        await self.queue.enqueue(f"slack-{secrets.token_urlsafe(12)}", JOB_KIND, user_key, payload)
        if self.runner is not None:
            self.runner.notify()

    async def run_job(self, job: Job) -> None:
        """Run one accepted message (on whichever instance claimed it) and answer it."""
        p = job.payload
        chat_user = ChatUser(str(p["platform"]), str(p["user_team"]), str(p["user"]))
        team, channel, thread_ts = str(p["team"]), str(p["channel"]), str(p["thread_ts"])
        indicator = Indicator(channel, thread_ts)
        indicator.placeholder_ts = p.get("placeholder_ts")
        indicator.status_set = bool(p.get("status_set"))
        ref = PlatformRef("slack", team, channel, thread_ts)
        try:
            reply = await self.assistant.handle_message(chat_user, ref, str(p["text"]))
        except Exception:
            log.exception("assistant failed on a message (job %s)", job.job_id)
            await self.post(
                channel, thread_ts, [text_message(FAILURE_TEXT)], indicator.placeholder_ts
            )
            if indicator.status_set:
                await self._clear_status(indicator)
            return
        await self.deliver(reply, chat_user, team, channel, thread_ts, indicator)


@contextlib.asynccontextmanager
async def open_durable_bot(
    config: SlackBotConfig,
    assistant: AssistantPort,
    engine: AsyncEngine,
    *,
    limits: RunLimits | None = None,
    lease: timedelta = timedelta(seconds=30),
    poll_seconds: float = 1.0,
    clock: Clock = utc_now,
    socket_mode: bool = False,
) -> AsyncIterator[SlackBot]:
    """Like ``open_bot``, with durable runs and this instance's worker running them.

    On SQLite (the embedded, single-process default) unfinished runs are requeued at start;
    on PostgreSQL a dead instance's runs are taken over when their lease runs out."""
    async with aiohttp.ClientSession() as session:
        client = make_web_client(config, session)
        queue = SqlJobQueue(engine, clock)
        adapter = DurableSlackAdapter(
            config, assistant, client, SqlApprovalMessages(engine, clock), queue
        )
        app = build_app(
            config,
            assistant,
            engine,
            client=client,
            clock=clock,
            socket_mode=socket_mode,
            adapter=adapter,
        )
        embedded = engine.dialect.name == "sqlite"
        async with JobRunner(
            queue,
            adapter.run_job,
            limits or RunLimits(),
            lease=lease,
            poll_seconds=poll_seconds,
            recover_on_start=embedded,
        ) as runner:
            adapter.runner = runner
            yield SlackBot(app, adapter)
