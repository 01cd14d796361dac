"""Slack's standardized app authentication (``SlackBotConfig.user_connections``).

Slack shows Connect / Disconnect in its own UI and asks opsbot through events; opsbot
answers with its own OIDC login (``AssistantPort.link_url``), so the link is made exactly as
with the Connect button, and reports each user's state with ``apps.user.connection.update``:

- ``user_connection`` ``connect`` → Slack's connect modal (``apps.user.connection.requestAuth``)
  whose provider opens opsbot's login; ``disconnect`` → unlink, then report ``disconnected``;
- ``user_connection_status_requested`` → report what the core says now;
- a link completed (``HomeViews.linked``) or removed (``/ops unlink``) → report it.

With the setting off, the events are acknowledged and ignored (one log line): the Connect
button is the way in.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp

from bot.slack.core import ChatUser
from bot.slack.incoming import clicked_by
from bot.slack.output import SlackOutput
from bot.slack.render import (
    AUTH_PROVIDER_CONNECT_ACTION_ID,
    AUTH_PROVIDER_DISCONNECT_ACTION_ID,
    auth_provider_block,
)

log = logging.getLogger(__name__)

EVENTS = ("user_connection", "user_connection_status_requested")


def primary_provider(login_url: str) -> dict[str, Any]:
    """The provider Slack's connect modal shows: the auth_provider block's fields."""
    block = auth_provider_block(login_url)
    return {k: v for k, v in block.items() if k not in ("type", "block_id")}


async def report_connection(output: SlackOutput, chat_user: ChatUser, *, connected: bool) -> None:
    """Tell Slack whether the user is connected (best effort: Slack asks again later)."""
    if not output.config.user_connections or chat_user.platform != "slack":
        return
    try:
        await output.client.apps_user_connection_update(
            user_id=chat_user.user_id, status="connected" if connected else "disconnected"
        )
    except Exception as exc:
        log.warning("connection status of %s not reported: %s", chat_user.user_id, exc)


def _event_user(adapter: Any, event: dict[str, Any], body: dict[str, Any]) -> ChatUser | None:
    """Who a user-connection event is about; ``None`` (one info line) while the setting is off."""
    if not adapter.config.user_connections:
        log.info("%s ignored: standardized app authentication is off", event.get("type"))
        return None
    return ChatUser("slack", str(body.get("team_id")), str(event["user"]))


def register_user_connections(app: AsyncApp, adapter: Any) -> None:
    """``adapter`` is the ``SlackAdapter`` (typed loosely: it imports this module's user)."""

    @app.event("user_connection")
    async def user_connection(event: dict[str, Any], body: dict[str, Any]) -> None:
        chat_user = _event_user(adapter, event, body)
        if chat_user is None:
            return
        if event.get("subtype") == "disconnect":
            await adapter.assistant.unlink(chat_user)
            await report_connection(adapter, chat_user, connected=False)
            await adapter.publish_home(chat_user)
            return
        trigger_id = event.get("trigger_id")
        if not trigger_id:
            log.info("user_connection connect without a trigger_id from %s", chat_user.user_id)
            return
        status = await adapter.assistant.status(chat_user)
        if status.linked:  # already linked (Slack's record was stale): say so, nothing to open
            await report_connection(adapter, chat_user, connected=True)
            return
        url = status.login_url or await adapter.assistant.link_url(chat_user)
        await adapter.client.apps_user_connection_requestAuth(
            trigger_id=str(trigger_id), primary_provider=primary_provider(url)
        )

    @app.event("user_connection_status_requested")
    async def status_requested(event: dict[str, Any], body: dict[str, Any]) -> None:
        chat_user = _event_user(adapter, event, body)
        if chat_user is None:
            return
        status = await adapter.assistant.status(chat_user)
        await report_connection(adapter, chat_user, connected=status.linked)

    @app.action(AUTH_PROVIDER_CONNECT_ACTION_ID)
    async def connect_clicked(ack: AsyncAck, body: dict[str, Any]) -> None:
        # Slack opens the block's auth_url; as with the Connect button, keep where to say
        # "connected" once the login completes.
        await ack()
        adapter.remember_connect_prompt(clicked_by(body), body.get("response_url"))

    @app.action(AUTH_PROVIDER_DISCONNECT_ACTION_ID)
    async def disconnect_clicked(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        chat_user = clicked_by(body)
        await adapter.assistant.unlink(chat_user)
        await report_connection(adapter, chat_user, connected=False)
        await adapter.publish_home(chat_user)
