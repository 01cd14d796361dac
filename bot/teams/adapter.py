"""The Teams side of a conversation: accept a message, answer it, deliver the reply.

Business rules live in the core; this class only turns Teams activities into
``AssistantPort`` calls and the results into Adaptive Cards posted through ``TeamsOutbound``.
The message route (``bot.teams.app``) calls ``accept`` before Teams gets its 202: the
delivery is claimed in the shared ``processed_events`` (activity id + conversation id), the
conversation reference saved, and the run started (a task here; a job in
``bot.teams.durable``).

Example::

    adapter = TeamsAdapter(config, assistant, outbound, processed, approvals)
    if await adapter.accept(message):   # False for a redelivery
        ...                             # the answer is posted from a task or a job
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from bot.failures import answer_failed
from bot.teams.approvals import TeamsApprovals
from bot.teams.config import TeamsBotConfig
from bot.teams.core import (
    Answered,
    ApprovalRequested,
    AssistantPort,
    ChatUser,
    Decided,
    LinkRequired,
    Refused,
    Reply,
    ServerConnectRequired,
    Stopped,
)
from bot.teams.incoming import Conversation, TeamsMessage
from bot.teams.outbound import TeamsOutbound
from bot.teams.render import (
    answer_activities,
    note_activity,
    refusal_activity,
    server_connect_activity,
    sign_in_activity,
    stream_text,
    streamed_answer_activities,
    text_activity,
    typing_activity,
)
from bot.teams.sso import SsoLinked, TeamsSso
from bot.teams.store import SqlProcessedActivities
from bot.teams.streaming import TeamsStream
from infra.lifecycle import cancel_and_wait
from infra.storage.faults import is_connection_error

log = logging.getLogger(__name__)

FAILURE_TEXT = (
    "❌ Something went wrong on opsbot's side and the request was not completed. "
    "Nothing was changed; please try again."
)
# The final message of a stream whose reply continues in messages of its own.
HANDOFF_TEXT = "Details below."
APPROVAL_HANDOFF_TEXT = "A change needs approval: details below."
DATABASE_DOWN_TEXT = (
    "⚠️ opsbot could not reach its database just now, so your request was not completed. "
    "Please send it again in a minute."
)
TOO_LONG_TEXT = (
    "That message is too long for me ({limit} characters at most). Please shorten it and "
    "send it again."
)
SIGN_IN_SENT_TEXT = (
    "I've sent you a sign-in link in a private chat with me. Ask again once you're connected."
)
# The same for one MCP server in ``oauth`` mode: its *Connect <server>* card went privately.
SERVER_CONNECT_SENT_TEXT = (
    "I've sent you a link to connect {server} in a private chat with me. Ask again once "
    "you're connected."
)
LINKED_TEXT = "✅ Connected as {who}. Ask me again whenever you like."
NOTHING_TO_STOP_TEXT = (
    "Nothing is running or waiting for approval here, so there is nothing to stop."
)
# Teams has no Stop control of its own: the requester writes "stop" in the same thread (or
# personal chat); these are the words taken for it (after the @mention is stripped).
STOP_WORDS = frozenset({"stop", "/stop", "stop!", "stop."})


def is_stop(text: str) -> bool:
    return text.strip().lower() in STOP_WORDS


@dataclass(eq=False, repr=False)
class TeamsAdapter:
    config: TeamsBotConfig
    assistant: AssistantPort
    outbound: TeamsOutbound
    processed: SqlProcessedActivities
    approvals: TeamsApprovals
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    sso: TeamsSso | None = field(init=False)

    def __post_init__(self) -> None:
        self.sso = (
            TeamsSso(
                self.config.sso_connection_name,
                self.config.sso_audience,
                self.assistant,
                self.processed,
                self._sso_linked,
            )
            if self.config.sso_connection_name
            else None
        )

    # -- before the acknowledgement ---------------------------------------------------

    async def accept(self, message: TeamsMessage) -> bool:
        """Claim the delivery and start answering it; ``False`` for a redelivery (on any
        instance). In-process runs live in this process: a crash loses a run in flight."""
        if is_stop(message.text):
            return await self.accept_stop(message)
        if not await self.processed.claim(message.delivery_id):
            return False
        self._start(self.converse(message))
        return True

    async def accept_stop(self, message: TeamsMessage) -> bool:
        """A "stop" is handled here and now, never queued behind the run it stops (a durable
        run may hold the person's only run slot)."""
        if not await self.processed.claim(message.delivery_id):
            return False
        self._start(self.stop(message))
        return True

    async def _sso_linked(self, linked: SsoLinked) -> None:
        """Linked through Teams SSO: answer the question that brought the card, else tell the
        person privately that they can ask. Started here, off the invoke."""
        if linked.question is not None:
            self._start(self.converse(linked.question))
            return
        note = note_activity(LINKED_TEXT.format(who=linked.who))
        self._start(self._tell_linked(linked, note))

    async def _tell_linked(self, linked: SsoLinked, note: dict[str, Any]) -> None:
        try:
            await self.outbound.personal_chat(
                linked.service_url, linked.chat_user.team_id, linked.user_mri, [note]
            )
        except Exception as exc:  # the link stands; only the notice is lost
            log.warning("SSO link notice not sent: %s", type(exc).__name__)

    def _start(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Cancel runs still in flight (in-process mode, at shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def idle(self) -> None:
        """Wait for this process's runs to finish (tests, bench)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- after it ---------------------------------------------------------------------

    async def converse(self, message: TeamsMessage) -> None:
        try:
            await self.answer(message)
        except Exception:
            log.exception("answering a Teams message failed")

    async def answer(
        self, message: TeamsMessage, *, retry_on_connection_error: bool = False
    ) -> None:
        """Keep the conversation reference (for later proactive posts: a decision's result),
        show typing while the core works, then deliver its reply in the conversation.
        The reference is saved here, after the 202, to keep the acknowledgement to one write."""
        conversation = message.conversation
        await self.outbound.conversations.save(conversation)
        if len(message.text) > self.config.max_message_chars:
            await self._post(conversation, [note_activity(self._too_long())])
            return
        stream = self._stream(message)
        # Typing until the reply, or until a stream opens (it shows its own updates).
        typing = asyncio.ensure_future(self._keep_typing(conversation, stream))
        try:
            reply = await self.assistant.handle_message(
                message.chat_user,
                message.ref,
                message.text,
                events=stream.event if stream else None,
            )
        except Exception as exc:
            if retry_on_connection_error and is_connection_error(exc):
                raise
            lost = answer_failed(exc, "teams", message.chat_user.user_id)
            await cancel_and_wait(typing)
            failure = DATABASE_DOWN_TEXT if lost else FAILURE_TEXT
            if (
                stream is None
                or not stream.started
                or not await stream.finish(text_activity(failure))
            ):
                await self._post(conversation, [note_activity(failure)])
            return
        await cancel_and_wait(typing)
        if (
            stream is not None
            and stream.started
            and await self._end_stream(stream, reply, conversation)
        ):
            return
        await self.deliver(reply, message)

    def _stream(self, message: TeamsMessage) -> TeamsStream | None:
        """A stream for the reply in a personal chat (where Teams streams), or ``None``; it
        opens at the run's first event."""
        if not (self.config.streaming and message.is_personal):
            return None

        async def send(activities: list[dict[str, Any]]) -> list[str]:
            return await self.outbound.send(message.conversation, activities)

        return TeamsStream(
            send, self.config.working_text, every_seconds=self.config.stream_every_seconds
        )

    async def _end_stream(
        self, stream: TeamsStream, reply: Reply, conversation: Conversation
    ) -> bool:
        """End the stream with the reply's final message; ``True`` if that was all of the
        reply (else ``deliver`` posts it, or what follows the final message)."""
        if isinstance(reply, Answered):
            final, rest = streamed_answer_activities(reply.answer)
            if not await stream.finish(final):
                return False
            if rest:
                await self._post(conversation, rest)
            return True
        # A stream's final message needs text (Teams replaces the streamed text with it).
        if isinstance(reply, Refused):
            return await stream.finish(text_activity(f"⛔ {stream_text(reply.reason)}"))
        if isinstance(reply, Stopped):
            return await stream.finish(text_activity(reply.text))
        # A Connect prompt or an approval follows as its own messages.
        handoff = APPROVAL_HANDOFF_TEXT if isinstance(reply, ApprovalRequested) else HANDOFF_TEXT
        await stream.finish(text_activity(stream_text(stream.shown) or handoff))
        return False

    def _too_long(self) -> str:
        return TOO_LONG_TEXT.format(limit=self.config.max_message_chars)

    async def _keep_typing(self, conversation: Conversation, stream: TeamsStream | None) -> None:
        """Teams shows "typing" for a few seconds: send it again until the answer is ready
        (or ``stream`` opened)."""
        gate = stream.gate if stream is not None else contextlib.nullcontext()
        while True:
            async with gate:
                if stream is not None and stream.started:
                    return
                try:
                    await self.outbound.send(conversation, [typing_activity()])
                except Exception as exc:  # an indicator is never worth failing the answer for
                    log.info("typing indicator not sent: %s", type(exc).__name__)
            await asyncio.sleep(self.config.typing_every_seconds)

    async def deliver(self, reply: Reply, message: TeamsMessage) -> None:
        conversation = message.conversation
        if isinstance(reply, LinkRequired):
            await self.sign_in(message, reply.login_url)
            return
        if isinstance(reply, Refused):
            await self._post(conversation, [refusal_activity(reply.reason)])
            return
        if isinstance(reply, Answered):
            await self._post(conversation, answer_activities(reply.answer))
            return
        if isinstance(reply, ServerConnectRequired):
            if reply.answer is not None:
                await self._post(conversation, answer_activities(reply.answer))
            await self._privately(
                message,
                server_connect_activity(reply.server, reply.connect_url),
                SERVER_CONNECT_SENT_TEXT.format(server=reply.server),
            )
            return
        if isinstance(reply, Stopped):
            # The core words it for Slack (an emoji code): Teams shows the character.
            text = reply.text.replace(":black_square_for_stop:", "⏹️")
            await self._post(conversation, [note_activity(text)])
            return
        await self._waiting(reply, message)

    async def _waiting(self, reply: ApprovalRequested, message: TeamsMessage) -> None:
        activities: list[dict[str, Any]] = []
        if reply.answer_so_far is not None and reply.answer_so_far.answer:
            activities.extend(answer_activities(reply.answer_so_far))
        approval = reply.approval
        activities.append(
            note_activity(
                f"⏳ {approval.server} · {approval.tool} needs approval by an approver "
                f"(expires {approval.expires_at:%Y-%m-%d %H:%M} UTC). I'll post the result here."
            )
        )
        await self._post(message.conversation, activities)
        await self.approvals.post_cards(reply, message)

    async def sign_in(self, message: TeamsMessage, login_url: str) -> None:
        """The sign-in card goes to the person alone: in their personal chat with opsbot. In a
        channel the thread only hears that a link was sent privately. With Teams SSO it is an
        OAuthCard the client answers silently (``bot.teams.sso``); its button is the same
        IdP login."""
        card = (
            self.sso.sign_in_card(message, login_url)
            if self.sso is not None
            else sign_in_activity(login_url)
        )
        await self._privately(message, card)

    async def _privately(
        self, message: TeamsMessage, card: dict[str, Any], notice: str = SIGN_IN_SENT_TEXT
    ) -> None:
        """A card bound to the asker goes to their personal chat; a channel thread only hears
        that it was sent privately (``notice``)."""
        if message.is_personal:
            await self._post(message.conversation, [card])
            return
        await self.outbound.personal_chat(
            message.conversation.service_url, message.chat_user.team_id, message.user_mri, [card]
        )
        await self._post(message.conversation, [note_activity(notice)])

    async def _post(self, conversation: Conversation, activities: list[dict[str, Any]]) -> None:
        await self.outbound.send(conversation, activities)

    async def stop(self, message: TeamsMessage) -> None:
        """The same Stop as Slack's: the core stops the thread's run on whichever instance
        runs it (that run's own reply says what ran and what never started) and withdraws its
        pending approvals (their cards and the requester's thread say so). Only the thread's
        owner may; anyone else is told so and nothing changes."""
        conversation = message.conversation
        try:
            result = await self.assistant.stop(message.chat_user, message.ref)
        except Exception as exc:
            log.warning("stopping a Teams run failed: %s", type(exc).__name__, exc_info=exc)
            lost = is_connection_error(exc)
            await self._post(
                conversation, [note_activity(DATABASE_DOWN_TEXT if lost else FAILURE_TEXT)]
            )
            return
        if result.refused is not None:
            await self._post(conversation, [refusal_activity(result.refused)])
            return
        for decided in result.withdrawn:
            try:
                await self.approvals.announce(decided)
            except Exception:
                log.exception("withdrawn approval %s not shown in Teams", decided.approval_id)
        if not result.run_stopped and not result.withdrawn:
            await self._post(conversation, [note_activity(NOTHING_TO_STOP_TEXT)])

    # -- notices not caused by a Teams request ----------------------------------------

    async def announce(self, decided: Decided) -> None:
        """The expiry sweeper's (and other platforms') decisions: update the cards."""
        await self.approvals.announce(decided)

    async def linked(self, chat_user: ChatUser, who: str) -> None:
        """An account link just completed (``/oauth/callback``); nothing to update in Teams
        (the sign-in card is a plain link)."""
        log.info("Teams user linked as %s", who)
