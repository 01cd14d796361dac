"""The Slack side of a conversation: post replies, working indicators, cards, decisions.

Business rules live in the core; this class only turns its results into Web API calls.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.slack.cards import approval_card, decided_card
from bot.slack.config import SlackBotConfig
from bot.slack.core import (
    AlreadyDecided,
    Answered,
    ApprovalRequested,
    AssistantPort,
    ChatUser,
    Decided,
    DecisionOutcome,
    Expired,
    InvalidEdit,
    LinkRequired,
    NotAuthorised,
    PlatformRef,
    Refused,
    Reply,
)
from bot.slack.incoming import Progress, UserMessage
from bot.slack.render import (
    Message,
    answer_messages,
    connect_prompt,
    escape,
    slack_date,
    text_message,
)
from bot.slack.store import SqlApprovalMessages

log = logging.getLogger(__name__)

NOT_IN_CHANNEL_TEXT = (
    "I can't post in this conversation. Invite me with `/invite @opsbot`, "
    "mention me in a channel I'm in, or send me a direct message."
)
FAILURE_TEXT = (
    ":x: Something went wrong on opsbot's side and the request was not completed. "
    "Nothing was changed; please try again."
)

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


class SlackAdapter:
    def __init__(
        self,
        config: SlackBotConfig,
        assistant: AssistantPort,
        client: AsyncWebClient,
        approval_messages: SqlApprovalMessages,
    ) -> None:
        self.config = config
        self.assistant = assistant
        self.client = client
        self.approval_messages = approval_messages

    # -- policy on who may talk to us at all -------------------------------------------

    def team_allowed(self, user_team: str | None, home_team: str | None) -> bool:
        """Users of the installing workspace, plus explicitly configured teams (Slack Connect)."""
        if not user_team:
            return False
        return user_team == home_team or user_team in self.config.allowed_team_ids

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

    # -- answering a message ----------------------------------------------------------

    async def accept(self, message: UserMessage, delivery_id: str) -> bool:
        """Called before Slack is acknowledged; ``False`` if ``delivery_id`` was accepted
        before (a redelivery). In-process runs persist nothing here: the dedup middleware
        drops redeliveries."""
        return True

    async def converse(self, message: UserMessage) -> None:
        """Called after the acknowledgement: answer ``message`` in this process."""
        await self.answer(message, Progress(), _keep_nothing)

    async def answer(self, message: UserMessage, progress: Progress, record: Recorder) -> None:
        """Open the thread (``/ops ask``), show the working indicator, ask the core, deliver.

        Steps already in ``progress`` (an earlier attempt's) are not repeated; each new one is
        ``record``ed before the next, so a retry after a crash reuses the same placeholder."""
        channel, thread_ts = message.channel, message.thread_ts
        if thread_ts is None:
            if progress.thread_ts is None:
                opened = await self.open_thread(message)
                if opened is None:
                    return
                progress.thread_channel, progress.thread_ts = opened
                await record(progress)
            channel, thread_ts = progress.thread_channel or channel, progress.thread_ts
        if not progress.indicator_shown:
            shown = await self.start_working(channel, thread_ts, message.is_dm)
            progress.placeholder_ts, progress.status_set = shown.placeholder_ts, shown.status_set
            if progress.indicator_shown:
                await record(progress)
        indicator = Indicator(channel, thread_ts, progress.placeholder_ts, progress.status_set)
        ref = PlatformRef("slack", message.team_id, channel, thread_ts)
        try:
            reply = await self.assistant.handle_message(message.chat_user, ref, message.text)
        except Exception:
            log.exception("assistant failed on a message")
            await self.post(
                channel, thread_ts, [text_message(FAILURE_TEXT)], indicator.placeholder_ts
            )
            if indicator.status_set:
                await self._clear_status(indicator)
            return
        await self.deliver(reply, message.chat_user, message.team_id, channel, thread_ts, indicator)

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
            await self.ephemeral(channel, chat_user.user_id, connect_prompt(reply.login_url))
            return
        if isinstance(reply, Refused):
            messages = [text_message(f":no_entry_sign: {escape(reply.reason)}")]
        elif isinstance(reply, Answered):
            messages = answer_messages(reply.answer)
        else:
            messages = self._waiting_messages(reply)
        await self.post(channel, thread_ts, messages, replace_ts=replace)
        if indicator and indicator.status_set:
            await self._clear_status(indicator)
        if isinstance(reply, ApprovalRequested):
            for summary in reply.all:  # one card per write call
                await self.post_card(summary.approval_id, team_id, channel, thread_ts)

    def _waiting_messages(self, reply: ApprovalRequested) -> list[Message]:
        approval = reply.approval
        note = (
            f":hourglass_flowing_sand: `{escape(approval.server)}` · `{escape(approval.tool)}` "
            f"needs approval in #{escape(self.config.approvals_channel)} "
            f"(expires {slack_date(approval.expires_at)}). I'll post the result here."
        )
        if reply.answer_so_far is None or not reply.answer_so_far.answer:
            return [text_message(note)]
        messages = answer_messages(reply.answer_so_far)
        return [*messages, text_message(note)]

    # -- approvals --------------------------------------------------------------------

    async def post_card(
        self, approval_id: str, team_id: str, requester_channel: str, requester_thread_ts: str
    ) -> None:
        view = await self.assistant.approval_view(approval_id)
        if view is None:
            log.error("approval %s vanished before its card was posted", approval_id)
            return
        card = approval_card(view)
        response = await self.client.chat_postMessage(
            channel=self.config.approvals_channel, text=card.text, blocks=card.blocks
        )
        await self.approval_messages.save(
            approval_id,
            team_id,
            (str(response["channel"]), str(response["ts"])),
            (requester_channel, requester_thread_ts),
        )

    async def apply_outcome(
        self,
        outcome: DecisionOutcome | None,
        approval_id: str,
        clicker: ChatUser,
        channel: str | None,
        card_ts: str | None,
    ) -> None:
        """Show a decision: card updated in place and the requester told, or a refusal only
        the clicker sees."""
        if isinstance(outcome, Decided):
            await self._show_decision(outcome, clicker, channel, card_ts)
            return
        if isinstance(outcome, LinkRequired):
            await self.ephemeral(channel, clicker.user_id, connect_prompt(outcome.login_url))
            return
        if isinstance(outcome, AlreadyDecided):
            text = f":information_source: This request was already decided by {escape(outcome.by)}."
        elif isinstance(outcome, NotAuthorised):
            text = f":no_entry_sign: You can't decide this request: {escape(outcome.reason)}"
        elif isinstance(outcome, Expired):
            text = ":hourglass: This request has expired; nothing was run."
            await self._update_card(approval_id, channel, card_ts, "expired", "", "not run")
        elif isinstance(outcome, InvalidEdit):
            problems = "; ".join(f"{k}: {v}" for k, v in outcome.field_errors.items())
            text = f":warning: The edited arguments were not accepted: {escape(problems)}"
        else:
            text = FAILURE_TEXT
        await self.ephemeral(channel, clicker.user_id, text_message(text))

    async def _show_decision(
        self, outcome: Decided, clicker: ChatUser, channel: str | None, card_ts: str | None
    ) -> None:
        await self.announce(outcome, channel, card_ts, by=f"<@{clicker.user_id}>")
        for sibling in outcome.siblings:  # the step's other calls, run by this decision
            await self.announce(sibling)

    async def announce(
        self,
        outcome: Decided,
        channel: str | None = None,
        card_ts: str | None = None,
        *,
        by: str = "",
    ) -> None:
        """Show a decision taken anywhere (a click, or the expiry sweeper): the card is
        updated in place and the requester's thread is told."""
        by = outcome.decided_by or by
        await self._update_card(
            outcome.approval_id, channel, card_ts, outcome.decision, by, outcome.outcome
        )
        stored = await self.approval_messages.get(outcome.approval_id)
        if stored is not None:
            target: tuple[str, str] | None = (
                stored.requester_channel_id,
                stored.requester_thread_ts,
            )
        elif outcome.requester_ref is not None:
            target = (outcome.requester_ref.channel_id, outcome.requester_ref.thread_ts)
        else:
            target = None
        if target is None:
            log.warning("no requester thread known for approval %s", outcome.approval_id)
            return
        if outcome.decision == "expired":
            header = "Your request *expired* before an approver decided it; nothing was run."
        else:
            header = f"Your request was *{escape(outcome.decision)}* by {escape(by)}."
        result = outcome.requester_result
        if isinstance(result, Answered):
            messages = answer_messages(result.answer, header=header)
        elif isinstance(result, Refused):
            messages = [text_message(f"{header}\n{escape(result.reason)}")]
        else:
            messages = [text_message(f"{header}\n*Outcome:* {escape(outcome.outcome)}")]
        await self.post(target[0], target[1], messages)

    async def _update_card(
        self,
        approval_id: str,
        channel: str | None,
        card_ts: str | None,
        decision: str,
        by: str,
        outcome: str,
    ) -> None:
        stored = await self.approval_messages.get(approval_id)
        if stored is not None:
            channel, card_ts = stored.card_channel_id, stored.card_ts
        if not channel or not card_ts:
            log.warning("no card known for approval %s", approval_id)
            return
        view = await self.assistant.approval_view(approval_id)
        card = decided_card(view, approval_id, decision, by, outcome)
        await self.client.chat_update(
            channel=channel, ts=card_ts, text=card.text, blocks=card.blocks
        )
