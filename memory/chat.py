"""``/ops memory``: the chat-facing side of user memory, platform-neutral text in and out.

The chat user is resolved to a verified identity through the account link first; an
unlinked user has no memory. Usage::

    memory show
    memory set team payments | memory set project PAY | memory set style concise
    memory delete [team|project|style]
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.errors import BrokerError
from broker.types import ChatUser, Identity, IdentityService
from memory.store import FIELDS, InvalidPreferenceError, Preferences, UserMemory

USAGE = (
    "*What opsbot remembers about you* (only what you set here):\n"
    "• `/ops memory` or `/ops memory show` — show it\n"
    "• `/ops memory set team <team>` · `set project <KEY>` · `set style concise|detailed|bullets`\n"
    "• `/ops memory delete` — forget everything · `/ops memory delete <team|project|style>`"
)
LABELS = {
    "default_team": "Default team",
    "default_ticket_project": "Default ticket project",
    "answer_style": "Answer style",
}


def describe(prefs: Preferences) -> str:
    if prefs.is_empty():
        return "opsbot remembers nothing about you."
    lines = [
        f"• {LABELS[name]}: `{value}`"
        for name, value in prefs.model_dump().items()
        if value is not None
    ]
    return "*opsbot remembers:*\n" + "\n".join(lines)


@dataclass
class MemoryCommands:
    memory: UserMemory
    identities: IdentityService

    async def identity(self, chat_user: ChatUser) -> Identity | None:
        try:
            return await self.identities.resolve(chat_user)
        except BrokerError:
            return None

    async def preferences(self, chat_user: ChatUser) -> Preferences | None:
        """The chat user's own preferences (``None`` when not linked)."""
        identity = await self.identity(chat_user)
        return None if identity is None else await self.memory.get(identity)

    async def forget_all(self, chat_user: ChatUser) -> bool:
        identity = await self.identity(chat_user)
        return identity is not None and await self.memory.delete(identity)

    async def handle(self, chat_user: ChatUser, text: str) -> str:
        """Run one ``memory`` sub-command for ``chat_user``; returns the reply text."""
        identity = await self.identity(chat_user)
        if identity is None:
            return "Connect your account first (`/ops link`): memory belongs to your account."
        verb, _, rest = text.strip().partition(" ")
        verb = verb.lower()
        try:
            if verb in ("", "show"):
                return describe(await self.memory.get(identity))
            if verb == "set":
                name, _, value = rest.strip().partition(" ")
                value = value.strip()
                if name.lower() not in FIELDS or not value:
                    return USAGE
                prefs = await self.memory.update(identity, **{name.lower(): value})
                return "Saved. " + describe(prefs)
            if verb in ("delete", "forget", "clear"):
                field = rest.strip().lower() or None
                removed = await self.memory.delete(identity, field)
                if not removed:
                    return "There was nothing to delete."
                return "Deleted. " + describe(await self.memory.get(identity))
        except InvalidPreferenceError as exc:
            return f"Not saved — {exc}."
        return USAGE
