"""App Home and account links: Homes republished when an approval is created or decided,
Connect prompts replaced once the user has linked."""

from __future__ import annotations

import asyncio
import logging
import time

from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.slack.connections import report_connection
from bot.slack.core import (
    ChatUser,
)
from bot.slack.home import home_view
from bot.slack.output import SlackOutput
from bot.slack.render import (
    Message,
    escape,
    text_message,
)

log = logging.getLogger(__name__)

CONNECT_PROMPT_TTL_SECONDS = 30 * 60
# How long a stopping bot waits for the Home republishes of approval changes under way.
STOP_WAIT_SECONDS = 5.0


class HomeViews(SlackOutput):
    # -- account links ----------------------------------------------------------------

    def remember_connect_prompt(self, chat_user: ChatUser, response_url: str | None) -> None:
        """The user clicked *Connect your account* on a prompt only they see: keep where to
        replace it from (at most a few per user, none older than Slack honours)."""
        if not response_url:
            return
        now = time.monotonic()
        kept = [
            (at, url)
            for at, url in self._connect_prompts.get(chat_user, [])
            if now - at < CONNECT_PROMPT_TTL_SECONDS and url != response_url
        ]
        self._connect_prompts[chat_user] = [*kept[-4:], (now, response_url)]

    def remember_server_prompt(
        self, chat_user: ChatUser, server: str, response_url: str | None
    ) -> None:
        """The user clicked *Connect <server>*: keep where to say "Connected to <server>"."""
        if not response_url:
            return
        now = time.monotonic()
        key = (chat_user, server)
        kept = [
            (at, url)
            for at, url in self._server_prompts.get(key, [])
            if now - at < CONNECT_PROMPT_TTL_SECONDS and url != response_url
        ]
        self._server_prompts[key] = [*kept[-4:], (now, response_url)]

    async def server_connected(self, chat_user: ChatUser, server: str) -> None:
        """An MCP server was connected: the Connect prompts the user clicked say so."""
        message = text_message(
            f":white_check_mark: Connected to *{escape(server)}*. Ask your question again."
        )
        await self._replace_prompts(self._server_prompts.pop((chat_user, server), []), message)

    async def _replace_prompts(self, prompts: list[tuple[float, str]], message: Message) -> None:
        for _at, url in prompts:
            try:
                webhook = AsyncWebhookClient(url, session=self.client.session)
                await webhook.send(text=message.text, blocks=message.blocks, replace_original=True)
            except Exception as exc:  # an expired prompt stays as it was
                log.info("connect prompt not replaced: %s", type(exc).__name__)

    async def linked(self, chat_user: ChatUser, who: str) -> None:
        """An account link completed: the Connect prompts the user clicked now say so, and
        their App Home no longer asks them to connect."""
        await report_connection(self, chat_user, connected=True)
        message = text_message(
            f":white_check_mark: Connected as *{escape(who)}*. Ask your question again."
        )
        await self._replace_prompts(self._connect_prompts.pop(chat_user, []), message)
        try:
            await self.publish_home(chat_user)
        except Exception as exc:
            log.warning("home not published after linking: %s", type(exc).__name__)

    async def publish_home(self, chat_user: ChatUser, *, fresh: bool = False) -> None:
        """App Home for ``chat_user``: status, their pending requests, what waits for them.

        Publishes overlap (opening the tab asks the IdP and mints tokens; a decision
        republishes at once): one that finishes after a newer one started is dropped, so an
        older, slower read never covers a newer view."""
        started = self._home_publishes.get(chat_user, 0) + 1
        self._home_publishes[chat_user] = started
        # fresh: the person opened the tab, so ask the IdP now (a revoked link shows at once)
        status = await self.assistant.status(chat_user, fresh=fresh)
        if not status.linked and status.login_url is None:
            status = type(status)(linked=False, login_url=await self.assistant.link_url(chat_user))
        standard = self.config.user_connections
        view = home_view(status, [], [], standard_connect=standard)
        if status.linked:
            if fresh:
                self._home_servers[chat_user] = tuple(await self.assistant.connections(chat_user))
            view = home_view(
                status,
                await self.assistant.my_requests(chat_user),
                await self.assistant.awaiting_approver(chat_user),
                await self.assistant.remembered(chat_user),
                # asked only when the person asked (opened the tab, clicked Refresh): the
                # republishing after every approval shows the last answer and does not
                # mint tokens for each reader
                self._home_servers.get(chat_user, ()),
                standard_connect=standard,
            )
        if self._home_publishes.get(chat_user) != started:
            return  # a newer publish for this user is under way; it shows newer data
        await self.client.views_publish(user_id=chat_user.user_id, view=view)

    async def approval_changed(self, approval_id: str) -> None:
        """The core's word that ``approval_id`` changed state (created, decided, executing,
        finished): its Homes show it now, not once the run has resumed."""
        if not self._following_approvals:
            return  # the bot is stopping: the stores a Home reads are closing
        task = asyncio.current_task()
        assert task is not None  # the core calls listeners in tasks of their own
        self._changes_under_way.add(task)
        try:
            await self.refresh_homes(approval_id)
        finally:
            self._changes_under_way.discard(task)

    async def stop_following_approvals(self, within: float = STOP_WAIT_SECONDS) -> None:
        """At shutdown, before the stores close: no Home is republished for an approval's
        change from now on, and those under way finish first (for up to ``within`` seconds,
        then they are cancelled). Why: a decision's republish ran on after Ctrl-C and read
        from a closed database (``home not published: ValueError``)."""
        self._following_approvals = False
        under_way = [t for t in self._changes_under_way if not t.done()]
        if not under_way:
            return
        _, late = await asyncio.wait(under_way, timeout=within)
        for task in late:
            task.cancel()

    async def refresh_homes(self, approval_id: str) -> None:
        """Republish App Home for the requester and every eligible approver of
        ``approval_id`` (created or decided), so no Home shows a stale list."""
        self._homes_due[approval_id] = None
        # One round at a time for every approval: a change during a round makes one more
        # round, for all the approvals changed meanwhile.
        await self._audience_runs.run("", self._refresh_due_homes)

    async def _refresh_due_homes(self, _key: str) -> None:
        due = list(self._homes_due)
        self._homes_due.clear()
        audience: dict[ChatUser, None] = {}
        for approval_id in due:
            # Asked each time, not kept: someone who linked since the approval was created
            # (and may decide it now) must have their Home republished too.
            try:
                audience.update(dict.fromkeys(await self.assistant.home_audience(approval_id)))
            except Exception as exc:  # Home is a convenience: never fail the decision for it
                log.warning("home audience of %s unknown: %s", approval_id, type(exc).__name__)
        for chat_user in audience:  # each user's Home once, however many of theirs changed
            if chat_user.platform == "slack":
                await self._republish_home(chat_user)

    async def _republish_home(self, chat_user: ChatUser) -> None:
        """``publish_home``, once at a time per user: a change while one is under way makes
        it publish once more afterwards (a burst of changes is one or two publishes)."""
        await self._home_runs.run(chat_user, self._publish_home_logged)

    async def _publish_home_logged(self, chat_user: ChatUser) -> None:
        try:
            await self.publish_home(chat_user)
        except Exception as exc:  # one user's Home does not stop the others
            log.warning("home not published: %s", type(exc).__name__)
