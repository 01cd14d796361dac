"""Posting to Slack: the adapter's base (messages in order, ephemerals with a DM fallback)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.config import SlackBotConfig
from bot.slack.core import (
    AssistantPort,
    ChatUser,
    ServerConnection,
)
from bot.slack.once import OnceAtATime
from bot.slack.render import (
    Message,
    connect_prompt,
)
from bot.slack.store import SqlApprovalMessages
from bot.slack.streaming import AgentSessions

log = logging.getLogger(__name__)

FAILURE_TEXT = (
    ":x: Something went wrong on opsbot's side and the request was not completed. "
    "Nothing was changed; please try again."
)
# In-process runs only (a durable run goes back in the queue instead): the request is not
# kept anywhere, so the person is asked to send it again.
DATABASE_DOWN_TEXT = (
    ":warning: opsbot could not reach its database just now, so your request was not "
    "completed. Please send it again in a minute."
)


@dataclass(eq=False, repr=False)
class SlackOutput:
    """What every part of the Slack adapter shares: its config, the core, the Web API client
    and where approval messages are."""

    config: SlackBotConfig
    assistant: AssistantPort
    client: AsyncWebClient
    approval_messages: SqlApprovalMessages
    # response_urls of Connect prompts a user clicked, newest last: replaced with
    # "Connected as …" once the link completes (Slack keeps them valid for 30 minutes).
    _connect_prompts: dict[ChatUser, list[tuple[float, str]]] = field(
        default_factory=dict, init=False
    )
    # The same for *Connect <server>* prompts (MCP servers in ``auth: oauth`` mode).
    _server_prompts: dict[tuple[ChatUser, str], list[tuple[float, str]]] = field(
        default_factory=dict, init=False
    )
    # App Home publishes started per user: only the latest may publish (see publish_home).
    _home_publishes: dict[ChatUser, int] = field(default_factory=dict, init=False)
    # Each user's servers as last asked (opening the tab, Refresh): a republished Home
    # shows them again without minting a token for every reader.
    _home_servers: dict[ChatUser, tuple[ServerConnection, ...]] = field(
        default_factory=dict, init=False
    )
    # Homes republished once at a time per user, and the changed approvals' audiences
    # asked by one round at a time for all that changed since the last round: twenty
    # clicks' changes (decided, executing, finished) are a few rounds, each republishing
    # a user's Home once, not a round per change per approval.
    _home_runs: OnceAtATime[ChatUser] = field(default_factory=OnceAtATime, init=False)
    _audience_runs: OnceAtATime[str] = field(default_factory=OnceAtATime, init=False)
    # Approval ids changed since the last round.
    _homes_due: dict[str, None] = field(default_factory=dict, init=False)
    # The core's approval-change calls under way (``approval_changed``), and whether the bot
    # stopped following them (``stop_following_approvals``).
    _changes_under_way: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _following_approvals: bool = field(default=True, init=False)
    # The workspace the bot token belongs to (``auth.test``); ``learn_home_team`` sets it.
    home_team: str | None = field(default=None, init=False)
    _home_team_asked_at: float | None = field(default=None, init=False)
    # The threads' agent session status (processing, suspended, active, closed).
    sessions: AgentSessions = field(init=False)

    def __post_init__(self) -> None:
        self.sessions = AgentSessions(self.client)

    async def post(
        self,
        channel: str,
        thread_ts: str | None,
        messages: list[Message],
        replace_ts: str | None = None,
    ) -> str | None:
        """Post ``messages`` in order; the first may replace a placeholder. Returns first ts."""
        first: str | None = None
        for i, message in enumerate(messages):
            if i == 0 and replace_ts:
                await self.client.chat_update(
                    channel=channel, ts=replace_ts, text=message.text, blocks=message.blocks
                )
                first = replace_ts
                continue
            response = await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=message.text, blocks=message.blocks
            )
            first = first or str(response["ts"])
        return first

    async def update_or_log(self, channel: str, ts: str, message: Message, what: str) -> None:
        """Replace the message at ``ts``; a refusal (deleted, too old) is one warning line
        saying ``could not <what>``: the decision it shows stands either way."""
        try:
            await self.client.chat_update(
                channel=channel, ts=ts, text=message.text, blocks=message.blocks
            )
        except SlackApiError as exc:
            log.warning("could not %s: %s", what, exc.response.get("error"))

    def link_prompt(self, login_url: str) -> Message:
        """The Connect prompt for ``login_url`` in this app's style (``user_connections``:
        Slack's standard app authentication)."""
        return connect_prompt(login_url, standard=self.config.user_connections)

    async def ephemeral(self, channel: str | None, user: str, message: Message) -> None:
        """Only ``user`` sees it; without a channel (App Home), a DM instead."""
        if channel:
            try:
                await self.client.chat_postEphemeral(
                    channel=channel, user=user, text=message.text, blocks=message.blocks
                )
                return
            except SlackApiError as exc:
                log.info("ephemeral failed (%s); sending a DM", exc.response.get("error"))
        await self.client.chat_postMessage(channel=user, text=message.text, blocks=message.blocks)
