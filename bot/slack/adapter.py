"""The Slack side of a conversation: post replies, working indicators, cards, decisions.

Business rules live in the core; this class only turns its results into Web API calls.
Cards and decisions are in ``bot.slack.decisions``, App Home and account links in
``bot.slack.homes``, posting in ``bot.slack.output``; ``SlackAdapter`` is all of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.failures import answer_failed
from bot.slack.core import (
    Answered,
    ApprovalRequested,
    ChatUser,
    LinkRequired,
    PlatformRef,
    Refused,
    Reply,
    ServerConnectRequired,
    Stopped,
)
from bot.slack.decisions import DecisionViews
from bot.slack.incoming import Progress, UserMessage
from bot.slack.output import DATABASE_DOWN_TEXT, FAILURE_TEXT
from bot.slack.render import (
    Message,
    answer_messages,
    escape,
    server_connect_prompt,
    slack_date,
    text_message,
)
from bot.slack.streaming import LiveAnswer, closing_blocks, markdown_text
from infra.faults import crash_point
from infra.storage.faults import is_connection_error

log = logging.getLogger(__name__)

LINK_FIRST_TEXT = "Connect your company account first: I sent you a private link."
SERVER_FIRST_TEXT = "Connect {server} first: I sent you a private link."
NOTHING_TO_STOP_TEXT = "Nothing was running or waiting for approval in this thread."
# The agent session's status after each kind of reply.
SESSION_AFTER: dict[type, str] = {
    Answered: "active",
    Refused: "active",
    LinkRequired: "active",
    ServerConnectRequired: "active",
    ApprovalRequested: "suspended",
    Stopped: "closed",
}

NOT_IN_CHANNEL_TEXT = (
    "I can't post in this conversation. Invite me with `/invite @opsbot`, "
    "mention me in a channel I'm in, or send me a direct message."
)

HOME_TEAM_RETRY_SECONDS = 30.0

# Saves a message's ``Progress`` (durable runs keep it in their job).
Recorder = Callable[[Progress], Awaitable[None]]


async def _keep_nothing(_progress: Progress) -> None:
    """In-process runs (``OPSBOT_RUNS__DURABLE=false``) keep no record: a crash loses them."""


@dataclass(slots=True)
class Indicator:
    """How the user sees that a run is going: an assistant status, or a placeholder message."""

    channel: str
    thread_ts: str
    placeholder_ts: str | None = None
    status_set: bool = False


class SlackAdapter(DecisionViews):
    # Streaming until Slack says this workspace has no such method (then the placeholder).
    streaming_available: bool = True

    # -- policy on who may talk to us at all -------------------------------------------

    async def learn_home_team(self) -> str | None:
        """Ask ``auth.test`` which workspace the bot token belongs to: that team is always
        served. Until Slack has answered, only ``allowed_team_ids`` are (asked again at most
        every ``HOME_TEAM_RETRY_SECONDS``)."""
        if self.home_team is not None:
            return self.home_team
        now = asyncio.get_running_loop().time()
        asked = self._home_team_asked_at
        if asked is not None and now - asked < HOME_TEAM_RETRY_SECONDS:
            return None
        self._home_team_asked_at = now
        try:
            response = await self.client.auth_test()
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("auth.test failed (%s): serving only ALLOWED_TEAM_IDS for now", exc)
            return None
        team = response.get("team_id")
        self.home_team = str(team) if isinstance(team, str) and team else None
        return self.home_team

    def team_allowed(self, *teams: str | None) -> bool:
        """Every team named is the bot's own workspace or configured (Slack Connect guests)."""
        allowed = self.config.allowed_team_ids | {self.home_team or ""}
        return all(team and team in allowed for team in teams)

    def event_served(self, body: Mapping[str, Any]) -> bool:
        """An Events API envelope's team and its acting user's (a Slack Connect guest's own)
        are both served; an event from elsewhere is logged (one line) and ignored."""
        event = body.get("event")
        event = event if isinstance(event, Mapping) else {}
        envelope_team = body.get("team_id")
        user_team = event.get("user_team") or event.get("team") or envelope_team
        if self.team_allowed(envelope_team, user_team):
            return True
        log.info(
            "ignored a %s event from team %s (user team %s): not served",
            event.get("type"),
            envelope_team,
            user_team,
        )
        return False

    # -- conversations ----------------------------------------------------------------

    async def start_working(self, channel: str, thread_ts: str, is_dm: bool) -> Indicator:
        indicator = Indicator(channel, thread_ts)
        if is_dm:
            try:
                await self.client.assistant_threads_setStatus(
                    channel_id=channel, thread_ts=thread_ts, status="is working on it…"
                )
                indicator.status_set = True
                return indicator
            except SlackApiError as exc:
                # Not an assistant thread (or the scope is missing): use a placeholder.
                log.info("setStatus unavailable: %s", exc.response.get("error"))
        try:
            response = await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=self.config.working_text
            )
        except SlackApiError as exc:
            # No indicator is better than no answer; the reply is posted afresh later.
            log.warning("could not post a placeholder: %s", exc.response.get("error"))
            return indicator
        indicator.placeholder_ts = str(response["ts"])
        return indicator

    async def stop_working(self, indicator: Indicator) -> None:
        if indicator.placeholder_ts:
            try:
                await self.client.chat_delete(
                    channel=indicator.channel, ts=indicator.placeholder_ts
                )
            except SlackApiError as exc:
                log.warning("could not remove placeholder: %s", exc.response.get("error"))
            indicator.placeholder_ts = None
        if indicator.status_set:
            await self._clear_status(indicator)

    async def _clear_status(self, indicator: Indicator) -> None:
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=indicator.channel, thread_ts=indicator.thread_ts, status=""
            )
        except SlackApiError as exc:
            log.info("could not clear status: %s", exc.response.get("error"))
        indicator.status_set = False

    # -- answering a message ----------------------------------------------------------

    async def accept(self, message: UserMessage, delivery_id: str) -> bool:
        """Called before Slack is acknowledged; ``False`` if ``delivery_id`` was accepted
        before (a redelivery). In-process runs persist nothing here: the dedup middleware
        drops redeliveries."""
        return True

    async def converse(self, message: UserMessage) -> None:
        """Called after the acknowledgement: answer ``message`` in this process."""
        await self.answer(message, Progress(), _keep_nothing)

    async def answer(
        self,
        message: UserMessage,
        progress: Progress,
        record: Recorder,
        *,
        retry_on_connection_error: bool = False,
    ) -> None:
        """Open the thread (``/ops ask``), show the working indicator, ask the core, deliver.

        Steps already in ``progress`` (an earlier attempt's) are not repeated; each new one is
        ``record``ed before the next, so a retry after a crash reuses the same placeholder.
        ``retry_on_connection_error``: a database connection error is raised (the job goes
        back in the queue) instead of being answered as a failure."""
        channel, thread_ts = message.channel, message.thread_ts
        if thread_ts is None:
            if progress.thread_ts is None:
                opened = await self.open_thread(message)
                if opened is None:
                    return
                progress.thread_channel, progress.thread_ts = opened
                await record(progress)
            channel, thread_ts = progress.thread_channel or channel, progress.thread_ts
        live = await self._open_stream(message, channel, thread_ts, progress, record)
        if live is None and not progress.indicator_shown:
            shown = await self.start_working(channel, thread_ts, message.is_dm)
            progress.placeholder_ts, progress.status_set = shown.placeholder_ts, shown.status_set
            if progress.indicator_shown:
                await record(progress)
        indicator = Indicator(channel, thread_ts, progress.placeholder_ts, progress.status_set)
        ref = PlatformRef("slack", message.team_id, channel, thread_ts)
        await self.sessions.set_status(channel, thread_ts, "processing")
        try:
            reply = await self.assistant.handle_message(
                message.chat_user, ref, message.text, events=live.event if live else None
            )
        except Exception as exc:
            if retry_on_connection_error and is_connection_error(exc):
                raise
            connection_lost = answer_failed(exc, "slack", message.chat_user.user_id)
            text = DATABASE_DOWN_TEXT if connection_lost else FAILURE_TEXT
            await self.sessions.set_status(channel, thread_ts, "active")
            if live is not None and await live.finish(text):
                return
            await self.post(channel, thread_ts, [text_message(text)], indicator.placeholder_ts)
            if indicator.status_set:
                await self._clear_status(indicator)
            return
        if isinstance(reply, ApprovalRequested):
            crash_point("before_card")
        streamed = live is not None and await self.deliver_stream(
            live, reply, message.chat_user, message.team_id
        )
        if not streamed:
            await self.deliver(
                reply, message.chat_user, message.team_id, channel, thread_ts, indicator
            )
        await self.sessions.set_status(channel, thread_ts, SESSION_AFTER[type(reply)])

    async def _open_stream(
        self,
        message: UserMessage,
        channel: str,
        thread_ts: str,
        progress: Progress,
        record: Recorder,
    ) -> LiveAnswer | None:
        """The answer's stream (an earlier attempt's, or a new one), or ``None`` when it is
        off, refused by Slack, or an earlier attempt already showed a placeholder."""
        if not (self.config.streaming and self.streaming_available):
            return None
        if progress.placeholder_ts is not None or progress.status_set:
            return None
        user = message.chat_user
        live = LiveAnswer(
            self.client,
            channel,
            thread_ts,
            user.team_id,
            user.user_id,
            self.config.approvals_channel,
            ts=progress.stream_ts,
        )
        if progress.stream_ts is None:
            if not await live.start():
                self.streaming_available = not live.unavailable
                return None
            progress.stream_ts = live.ts
            await record(progress)
        return live

    async def deliver_stream(
        self, live: LiveAnswer, reply: Reply, chat_user: ChatUser, team_id: str
    ) -> bool:
        """Finish the stream with ``reply``; ``False`` when the stream broke (nothing more was
        shown: the caller posts the reply as messages)."""
        if isinstance(reply, Answered):
            return await live.finish(
                live.answer_markdown(reply.answer), closing_blocks(reply.answer)
            )
        if isinstance(reply, Refused):
            return await live.finish(live.after_shown(f":no_entry_sign: {escape(reply.reason)}"))
        if isinstance(reply, Stopped):
            return await live.finish(live.after_shown(escape(reply.text)))
        if isinstance(reply, LinkRequired):
            if not await live.finish(LINK_FIRST_TEXT):
                return False
            prompt = self.link_prompt(reply.login_url)
            await self.ephemeral(live.channel, chat_user.user_id, prompt)
            return True
        if isinstance(reply, ServerConnectRequired):
            # As in ``deliver``: what could be answered in the thread, the Connect button
            # only to the asker (its link is bound to them).
            if reply.answer is not None:
                shown = await live.finish(
                    live.answer_markdown(reply.answer), closing_blocks(reply.answer)
                )
            else:
                shown = await live.finish(escape(SERVER_FIRST_TEXT.format(server=reply.server)))
            if not shown:
                return False
            prompt = server_connect_prompt(reply.server, reply.connect_url)
            await self.ephemeral(live.channel, chat_user.user_id, prompt)
            return True
        so_far = reply.answer_so_far
        if not await live.finish(markdown_text(so_far) if so_far and so_far.answer else ""):
            return False
        # The tasks above show what waits; the note and the cards are messages of their own
        # (each decision updates them in place).
        await self._post_waiting(reply, team_id, live.channel, live.thread_ts, None)
        return True

    async def stop_session(
        self, chat_user: ChatUser, team_id: str, channel: str, thread_ts: str
    ) -> None:
        """Stop pressed on the thread's agent session: the core stops its run (on whichever
        instance runs it: that run says what stopped) and withdraws its pending approvals
        (their cards and the thread say so here)."""
        ref = PlatformRef("slack", team_id, channel, thread_ts)
        result = await self.assistant.stop(chat_user, ref)
        if result.refused is not None:
            await self.ephemeral(
                channel,
                chat_user.user_id,
                text_message(f":no_entry_sign: {escape(result.refused)}"),
            )
            return
        for decided in result.withdrawn:
            await self.announce(decided)
        if result.run_stopped:
            return  # the run's own reply says what stopped, and sets the status
        if not result.withdrawn:
            await self.ephemeral(channel, chat_user.user_id, text_message(NOTHING_TO_STOP_TEXT))
        await self.sessions.set_status(channel, thread_ts, "closed")

    async def record_feedback(
        self, chat_user: ChatUser, team_id: str, channel: str, thread_ts: str, positive: bool
    ) -> None:
        ref = PlatformRef("slack", team_id, channel, thread_ts)
        await self.assistant.record_feedback(chat_user, ref, positive)
        await self.ephemeral(
            channel, chat_user.user_id, text_message("Thanks: your feedback was recorded.")
        )

    async def open_thread(self, message: UserMessage) -> tuple[str, str] | None:
        """``/ops ask``: quote the question in its channel; that message starts the thread.
        ``None`` (and the user told, through the command's ``response_url``) if opsbot
        cannot post there."""
        user, question = message.chat_user.user_id, escape(message.text)
        try:
            posted = await self.client.chat_postMessage(
                channel=message.channel, text=f"<@{user}> asked: {question}"
            )
        except SlackApiError as exc:
            log.info("cannot post in %s: %s", message.channel, exc.response.get("error"))
            if message.response_url:
                webhook = AsyncWebhookClient(message.response_url, session=self.client.session)
                await webhook.send(text=NOT_IN_CHANNEL_TEXT, response_type="ephemeral")
            return None
        return str(posted["channel"]), str(posted["ts"])

    async def deliver(
        self,
        reply: Reply,
        chat_user: ChatUser,
        team_id: str,
        channel: str,
        thread_ts: str,
        indicator: Indicator | None = None,
    ) -> None:
        replace = indicator.placeholder_ts if indicator else None
        if isinstance(reply, LinkRequired):
            if indicator:
                await self.stop_working(indicator)
            await self.ephemeral(channel, chat_user.user_id, self.link_prompt(reply.login_url))
            return
        if isinstance(reply, ServerConnectRequired):
            # What could be answered goes in the thread; the Connect button only to the
            # asker: its link is bound to them, and whoever signs in there would connect
            # their own account in the asker's name.
            prompt = server_connect_prompt(reply.server, reply.connect_url)
            if reply.answer is None:
                if indicator:
                    await self.stop_working(indicator)
                await self.ephemeral(channel, chat_user.user_id, prompt)
                return
            await self.deliver(
                Answered(reply.answer), chat_user, team_id, channel, thread_ts, indicator
            )
            await self.ephemeral(channel, chat_user.user_id, prompt)
            return
        if isinstance(reply, ApprovalRequested):
            so_far = reply.answer_so_far
            if so_far is not None and so_far.answer:
                await self.post(channel, thread_ts, answer_messages(so_far), replace_ts=replace)
                replace = None
            await self._post_waiting(reply, team_id, channel, thread_ts, replace)
        else:
            if isinstance(reply, Refused):
                messages = [text_message(f":no_entry_sign: {escape(reply.reason)}")]
            elif isinstance(reply, Stopped):
                messages = [text_message(escape(reply.text))]
            else:
                messages = answer_messages(reply.answer)
            await self.post(channel, thread_ts, messages, replace_ts=replace)
        if indicator and indicator.status_set:
            await self._clear_status(indicator)

    async def _post_waiting(
        self,
        reply: ApprovalRequested,
        team_id: str,
        channel: str,
        thread_ts: str,
        replace: str | None,
    ) -> None:
        """The "needs approval" note in the thread, then one card per write call (the
        note's ts lets each decision update it in place)."""
        note = self._waiting_note(reply)
        note_ts = await self.post(channel, thread_ts, [note], replace_ts=replace)
        for summary in reply.all:
            await self.post_card(summary.approval_id, team_id, channel, thread_ts, note_ts=note_ts)
            await self.refresh_homes(summary.approval_id)

    def _waiting_note(self, reply: ApprovalRequested) -> Message:
        approval = reply.approval
        return text_message(
            f":hourglass_flowing_sand: `{escape(approval.server)}` · `{escape(approval.tool)}` "
            f"needs approval in #{escape(self.config.approvals_channel)} "
            f"(expires {slack_date(approval.expires_at)}). I'll post the result here."
        )


__all__ = ["FAILURE_TEXT", "NOT_IN_CHANNEL_TEXT", "Indicator", "Recorder", "SlackAdapter"]
