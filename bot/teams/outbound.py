"""Posting to Teams outside a request: answers in a thread, personal chats, new channel
threads, updates. Everything goes through the Agents SDK's ``CloudAdapter`` proactive calls
with a conversation reference that ``SqlConversations`` keeps, so any instance can post.

Example::

    ids = await outbound.send(conversation, [text_activity("done")])
    await outbound.post_in_thread(decided.requester_ref, [note_activity("Approved")])
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from microsoft_agents.activity import (
    Activity,
    ChannelAccount,
    ConversationParameters,
    ConversationReference,
)
from microsoft_agents.hosting.aiohttp import CloudAdapter
from microsoft_agents.hosting.core import TurnContext
from microsoft_agents.hosting.core.authorization import AuthenticationConstants

from bot.teams.core import PlatformRef
from bot.teams.incoming import Conversation
from bot.teams.store import SqlConversations
from infra.characters import LONE_SURROGATE, replace_in_strings

log = logging.getLogger(__name__)
CHANNEL = "msteams"


class TeamsOutbound:
    def __init__(self, cloud: CloudAdapter, app_id: str, conversations: SqlConversations) -> None:
        self.cloud = cloud
        self.app_id = app_id
        self.conversations = conversations

    async def send(self, conversation: Conversation, activities: list[dict[str, Any]]) -> list[str]:
        """Post ``activities`` in ``conversation`` (in a channel: as replies in its thread);
        the new activities' ids."""
        return await self.send_to_reference(conversation.reference, activities)

    async def send_to_reference(
        self, reference_json: dict[str, Any], activities: list[dict[str, Any]]
    ) -> list[str]:
        reference = ConversationReference.model_validate(reference_json)
        ids: list[str] = []

        async def callback(context: TurnContext) -> None:
            sent = await context.send_activities([outgoing(a) for a in activities])
            ids.extend(str(r.id or "") for r in sent)

        await self.cloud.continue_conversation(self.app_id, _continuation(reference), callback)
        return ids

    async def post_in_thread(
        self, ref: PlatformRef, activities: list[dict[str, Any]]
    ) -> list[str] | None:
        """Post in the Teams thread ``ref`` names; ``None`` if opsbot never saw that thread."""
        conversation = await self.conversations.get(ref)
        if conversation is None:
            log.warning("no Teams conversation is known for a thread; nothing posted")
            return None
        return await self.send(conversation, activities)

    async def update(
        self, reference_json: dict[str, Any], activity_id: str, activity: dict[str, Any]
    ) -> None:
        """Replace the message ``activity_id`` in the conversation of ``reference_json``
        (PUT activity: everyone's copy changes)."""
        reference = ConversationReference.model_validate(reference_json)

        async def callback(context: TurnContext) -> None:
            replacement = outgoing({**activity, "id": activity_id})
            await context.update_activity(replacement)

        await self.cloud.continue_conversation(self.app_id, _continuation(reference), callback)

    async def _open_conversation(
        self,
        service_url: str,
        parameters: ConversationParameters,
        callback: Callable[[TurnContext], Awaitable[None]],
    ) -> None:
        """Create a conversation through the Connector at ``service_url``; ``callback`` runs
        in it (to read its id, or to post there)."""
        await self.cloud.create_conversation(
            self.app_id,
            CHANNEL,
            service_url,
            AuthenticationConstants.AGENTS_SDK_SCOPE,
            parameters,
            callback,
        )

    async def create_thread(
        self,
        service_url: str,
        tenant_id: str,
        channel_conversation_id: str,
        activity: dict[str, Any],
    ) -> tuple[str, str]:
        """Start a new thread in a channel with ``activity`` as its root post: the new
        conversation id (``...;messageid=<root>``) and the root activity's id."""
        parameters = ConversationParameters(
            is_group=True,
            agent=ChannelAccount(id=f"28:{self.app_id}"),
            tenant_id=tenant_id,
            channel_data={"channel": {"id": channel_conversation_id}, "tenant": {"id": tenant_id}},
            activity=outgoing(activity),
        )
        created: dict[str, str] = {}

        async def callback(context: TurnContext) -> None:
            conversation = context.activity.conversation
            created["conversation_id"] = str(conversation.id if conversation else "")
            created["activity_id"] = str(context.activity.id or "")

        await self._open_conversation(service_url, parameters, callback)
        conversation_id = created.get("conversation_id", "")
        root = created.get("activity_id") or conversation_id.partition(";messageid=")[2]
        return conversation_id, root

    async def personal_chat(
        self,
        service_url: str,
        tenant_id: str,
        user_mri: str,
        activities: list[dict[str, Any]],
    ) -> str:
        """Open (or reopen) the 1:1 chat between opsbot and a user and post ``activities``
        there; the chat's conversation id."""
        parameters = ConversationParameters(
            is_group=False,
            agent=ChannelAccount(id=f"28:{self.app_id}"),
            members=[ChannelAccount(id=user_mri)],
            tenant_id=tenant_id,
            channel_data={"tenant": {"id": tenant_id}},
        )
        opened: dict[str, str] = {}

        async def callback(context: TurnContext) -> None:
            conversation = context.activity.conversation
            opened["conversation_id"] = str(conversation.id if conversation else "")
            # A new chat has nothing to reply to: post to the conversation itself.
            context.activity.id = None
            await context.send_activities([outgoing(a) for a in activities])

        await self._open_conversation(service_url, parameters, callback)
        return opened.get("conversation_id", "")


def outgoing(activity: dict[str, Any]) -> Activity:
    """The SDK's ``Activity`` for ``activity`` (as ``bot.teams.render`` builds them), each lone
    surrogate in its text as U+FFFD: the SDK's models refuse one (JSON carries it, from a
    question an answer quotes or a tool's result), and the whole reply was not sent."""
    return Activity.model_validate(replace_in_strings(activity, LONE_SURROGATE))


def _continuation(reference: ConversationReference) -> Activity:
    """The SDK's continuation activity, addressed like the stored reference: in a channel
    thread the reference's activity id is the thread's root, so replies land in that thread."""
    continuation = reference.get_continuation_activity()
    continuation.id = reference.activity_id
    return continuation
