"""User memory in Slack: the App Home section and its *Forget all* button.

``/ops memory ...`` itself is one verb of the ``/ops`` command (``listeners``) and is
answered by the core (``memory.chat.MemoryCommands.handle``).
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

from bot.slack.adapter import SlackAdapter
from bot.slack.core import ChatUser
from bot.slack.render import Block, context, home_view, section
from memory.chat import describe
from memory.store import Preferences

FORGET_ACTION_ID = "memory_forget_all"


def memory_home_blocks(prefs: Preferences | None) -> list[Block]:
    """A divider, what is remembered, and a button to forget it (when there is something)."""
    blocks: list[Block] = [{"type": "divider"}, section("*Your preferences*")]
    if prefs is None or prefs.is_empty():
        blocks.append(context("opsbot remembers nothing about you. Set some with `/ops memory`."))
        return blocks
    blocks.append(section(describe(prefs)))
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": FORGET_ACTION_ID,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Forget all"},
                    "value": "all",
                }
            ],
        }
    )
    return blocks


def register_memory_actions(app: AsyncApp, adapter: SlackAdapter) -> None:
    @app.action(FORGET_ACTION_ID)
    async def forget_all(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        memory = getattr(adapter.assistant, "memory", None)
        user = body["user"]
        team = user.get("team_id") or (body.get("team") or {}).get("id")
        chat_user = ChatUser("slack", str(team), str(user["id"]))
        if memory is None:
            return
        await memory.forget_all(chat_user)
        status = await adapter.assistant.status(chat_user)
        pending = await adapter.assistant.pending_for(chat_user) if status.linked else []
        awaiting = await adapter.assistant.awaiting_approver(chat_user) if status.linked else []
        view = home_view(status, pending, awaiting)
        if status.linked:
            view["blocks"][2:2] = memory_home_blocks(await memory.preferences(chat_user))
        await adapter.client.views_publish(user_id=chat_user.user_id, view=view)
