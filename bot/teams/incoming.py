"""A Teams message activity as the adapter keeps it: who, where (the thread's ``PlatformRef``
and the conversation reference to answer at), what, and its delivery key.

Mapping (design, see ``/api/messages`` in docs): a Teams user is ``ChatUser("teams", tenant,
aadObjectId)``; a thread is ``PlatformRef("teams", tenant, channel key, reply chain)``, where
the channel key is the conversation id without its ``;messageid=`` suffix (hashed when longer
than the 64 characters the threads table keeps) and the reply chain is that message id in a
channel, or ``"chat"`` in a personal or group chat (one conversation, no threads).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from bot.teams.core import ChatUser, PlatformRef

PLATFORM = "teams"
MAX_KEY = 64
CHAT_THREAD = "chat"
_MESSAGE_ID = ";messageid="


@dataclass(frozen=True, slots=True)
class Conversation:
    """Where a thread lives in Teams: enough to post in it from any instance."""

    ref: PlatformRef
    conversation_id: str
    conversation_type: str
    service_url: str
    # ConversationReference (the SDK's model, dumped by alias): where to answer.
    reference: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TeamsMessage:
    chat_user: ChatUser
    user_mri: str
    user_name: str
    text: str
    activity_id: str
    # Where it was posted (its thread) and how to answer there.
    conversation: Conversation

    @property
    def ref(self) -> PlatformRef:
        return self.conversation.ref

    @property
    def delivery_id(self) -> str:
        return delivery_id(self.conversation.conversation_id, self.activity_id)

    @property
    def is_personal(self) -> bool:
        return self.conversation.conversation_type == "personal"

    @property
    def user_key(self) -> str:
        """Per-user concurrency key of durable runs."""
        return f"teams:{self.chat_user.team_id}:{self.chat_user.user_id}"

    def to_payload(self) -> dict[str, Any]:
        # The stored job's shape stays flat (jobs queued before an upgrade still load).
        where = self.conversation
        return {
            "chat_user": [self.chat_user.team_id, self.chat_user.user_id],
            "user_mri": self.user_mri,
            "user_name": self.user_name,
            "ref": [self.ref.team_id, self.ref.channel_id, self.ref.thread_ts],
            "text": self.text,
            "activity_id": self.activity_id,
            "conversation_id": where.conversation_id,
            "conversation_type": where.conversation_type,
            "service_url": where.service_url,
            "reference": where.reference,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> TeamsMessage:
        tenant, user = payload["chat_user"]
        ref_tenant, channel, thread = payload["ref"]
        return cls(
            chat_user=ChatUser(PLATFORM, tenant, user),
            user_mri=payload["user_mri"],
            user_name=payload["user_name"],
            text=payload["text"],
            activity_id=payload["activity_id"],
            conversation=Conversation(
                ref=PlatformRef(PLATFORM, ref_tenant, channel, thread),
                conversation_id=payload["conversation_id"],
                conversation_type=payload["conversation_type"],
                service_url=payload["service_url"],
                reference=payload["reference"],
            ),
        )


def delivery_id(conversation_id: str, activity_id: str) -> str:
    """The dedup key of one delivery (Teams has no redelivery header): activity id +
    conversation id, hashed to fit ``processed_events.event_id`` beside Slack's ids."""
    digest = hashlib.sha256(f"{conversation_id}\n{activity_id}".encode()).hexdigest()
    return f"teams:{digest[:48]}"


def short_key(value: str) -> str:
    """``value`` if it fits a 64-character key column, else a stable digest of it."""
    if len(value) <= MAX_KEY:
        return value
    return "h:" + hashlib.sha256(value.encode()).hexdigest()[:40]


def thread_ref(tenant_id: str, conversation_id: str, conversation_type: str) -> PlatformRef:
    base, _, message_id = conversation_id.partition(_MESSAGE_ID)
    thread = short_key(message_id) if conversation_type == "channel" and message_id else CHAT_THREAD
    return PlatformRef(PLATFORM, tenant_id, short_key(base), thread)
