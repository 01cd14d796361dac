"""The Slack emulator: what a person does in the web UI becomes what Slack would send the app.

A message becomes an ``app_mention`` (channel, with ``@opsbot``) or ``message.im`` (DM) event;
``/ops …`` a slash command; a button an ``block_actions`` payload (with a fresh ``trigger_id``);
a modal's submit a ``view_submission`` whose ack (close, errors, update) is applied to the
modal; opening the app's Home an ``app_home_opened`` event. Deliveries run in the background,
as Slack's do; a failed one leaves a notice from Slackbot that only that user sees.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

from sandbox.delivery import AppDelivery, AppResponse, new_event_id
from testing.slack_workspace import (
    APP_ID,
    BOT_NAME,
    BOT_USER_ID,
    TEAM_DOMAIN,
    TEAM_ID,
    Message,
    NotFoundError,
    OpenView,
    User,
    Workspace,
)

log = logging.getLogger(__name__)

SLACKBOT_ID = "USLACKBOT"
MESSAGE_CHARS = 40_000  # Slack refuses a longer message (msg_too_long)
STOPPABLE = frozenset({"processing", "suspended"})  # sessions the sandbox offers Stop for
RETRY_DELAYS = (0.0, 1.0, 3.0, 5.0)  # Slack: at once, then after 1 and 5 minutes
_HANDLE = re.compile(r"(?<![\w<])@([a-z][a-z0-9._-]*)", re.I)


class InputError(ValueError):
    """A UI request that cannot be carried out (unknown user, channel, message or view)."""


@dataclass
class _Hook:
    user: str
    channel: str
    message_ts: str | None


@dataclass
class SlackEmulator:
    workspace: Workspace
    delivery: AppDelivery
    base_url: str = ""
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _hooks: dict[str, _Hook] = field(default_factory=dict)

    # -- plumbing ---------------------------------------------------------------------------

    def _spawn(self, user: str, channel: str, coro: Coroutine[Any, Any, None]) -> None:
        async def guarded() -> None:
            try:
                await coro
            except Exception as exc:
                log.warning("delivery to the app failed", exc_info=True)
                self.notice(user, channel, f"opsbot could not be reached: {exc}")

        task = asyncio.create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def idle(self) -> None:
        """Wait for the deliveries in flight (tests)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def notice(self, user: str, channel: str, text: str) -> None:
        """An ephemeral message from Slackbot (as Slack shows delivery problems)."""
        if channel not in self.workspace.channels:
            channel = self.workspace.dm_of(user).id
        self.workspace.post(channel, SLACKBOT_ID, text, ephemeral_for=user)

    def _user(self, user_id: str) -> User:
        user = self.workspace.users.get(user_id)
        if user is None or user.is_bot:
            raise InputError(f"unknown user {user_id!r}")
        return user

    def _check(self, response: AppResponse, user: str, channel: str, what: str) -> bool:
        if response.status == 200:
            return True
        self.notice(user, channel, f"{what}: opsbot answered HTTP {response.status}.")
        return False

    def _new_hook(self, user: str, channel: str, message_ts: str | None = None) -> str:
        token = secrets.token_urlsafe(12)
        self._hooks[token] = _Hook(user, channel, message_ts)
        return f"{self.base_url}/hooks/{token}"

    # -- messages ---------------------------------------------------------------------------

    def say(self, user_id: str, channel_id: str, text: str, thread_ts: str | None = None) -> str:
        """A person posts ``text``; returns the message ts (``""`` for a slash command)."""
        user = self._user(user_id)
        channel = self.workspace.channels.get(channel_id)
        if channel is None or (channel.is_im and channel.im_user != user.id):
            raise InputError(f"unknown channel {channel_id!r}")
        text = text.strip()
        if not text:
            raise InputError("empty message")
        if len(text) > MESSAGE_CHARS:
            raise InputError(f"a Slack message holds at most {MESSAGE_CHARS:,} characters")
        if text.startswith("/"):
            self._command(user, channel.id, text)
            return ""
        encoded = self._encode_mentions(text)
        try:
            message = self.workspace.post(channel.id, user.id, encoded, thread_ts=thread_ts)
        except NotFoundError:
            raise InputError(f"unknown thread {thread_ts!r}") from None
        event: dict[str, Any] = {
            "user": user.id,
            "text": encoded,
            "ts": message.ts,
            "channel": channel.id,
            "event_ts": message.ts,
            "team": TEAM_ID,
            "client_msg_id": secrets.token_hex(16),
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        if channel.is_im:
            event.update(type="message", channel_type="im")
        elif f"<@{BOT_USER_ID}>" in encoded:
            event["type"] = "app_mention"
        else:
            return message.ts  # the app subscribes to mentions and DMs only
        self._spawn(user.id, channel.id, self._event(event, user.id, channel.id))
        return message.ts

    def _encode_mentions(self, text: str) -> str:
        """``@opsbot`` / ``@alice`` → ``<@U…>`` (what Slack clients send)."""
        by_name = {u.name.lower(): u.id for u in self.workspace.users.values()}

        def replace(match: re.Match[str]) -> str:
            user_id = by_name.get(match.group(1).lower())
            return f"<@{user_id}>" if user_id else match.group(0)

        text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return _HANDLE.sub(replace, text)

    async def _event(self, event: dict[str, Any], user: str, channel: str) -> None:
        """Deliver an event; like Slack, retry a failed delivery (same ``event_id``, with
        ``X-Slack-Retry-Num``) — after seconds here rather than Slack's minutes."""
        event_id = new_event_id()
        for attempt, delay in enumerate(RETRY_DELAYS):
            await asyncio.sleep(delay)
            try:
                response = await self.delivery.event(event, event_id, attempt)
            except httpx.TransportError as exc:
                response = AppResponse(0, str(exc))
            if response.status == 200:
                return
            log.warning("event %s: HTTP %s (attempt %d)", event_id, response.status, attempt + 1)
        self._check(response, user, channel, f"The {event['type']} event was not delivered")

    def _command(self, user: User, channel_id: str, text: str) -> None:
        command, _, rest = text.partition(" ")
        if command != "/ops":
            self.notice(user.id, channel_id, f"{command} is not a valid command.")
            return
        channel = self.workspace.channels[channel_id]
        form = {
            "token": "sandbox",
            "team_id": TEAM_ID,
            "team_domain": TEAM_DOMAIN,
            "channel_id": channel.id,
            "channel_name": "directmessage" if channel.is_im else channel.name,
            "user_id": user.id,
            "user_name": user.name,
            "command": command,
            "text": rest.strip(),
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "response_url": self._new_hook(user.id, channel.id),
            "trigger_id": self.workspace.new_trigger(user.id),
        }

        async def run() -> None:
            response = await self.delivery.command(form)
            if self._check(response, user.id, channel.id, f"{command} failed"):
                self._show_reply(user.id, channel.id, None, response)

        self._spawn(user.id, channel.id, run())

    def _show_reply(
        self, user: str, channel: str, thread_ts: str | None, response: AppResponse
    ) -> None:
        """A command's ack body (text/blocks) is shown to the user as Slack does."""
        data = response.json()
        if data is None:
            if response.body.strip():
                self.workspace.post(channel, BOT_USER_ID, response.body, ephemeral_for=user)
            return
        self.respond(_Hook(user, channel, None), data, thread_ts)

    def respond(self, hook: _Hook, data: dict[str, Any], thread_ts: str | None = None) -> None:
        text, blocks = str(data.get("text") or ""), data.get("blocks")
        if data.get("delete_original") and hook.message_ts:
            self.workspace.delete(hook.channel, hook.message_ts)
            return
        if not text and not blocks:
            return
        if data.get("replace_original") and hook.message_ts:
            self.workspace.update(hook.channel, hook.message_ts, text, blocks or [])
            return
        ephemeral = None if data.get("response_type") == "in_channel" else hook.user
        self.workspace.post(
            hook.channel, BOT_USER_ID, text, blocks, thread_ts=thread_ts, ephemeral_for=ephemeral
        )

    def hook(self, token: str) -> _Hook:
        try:
            return self._hooks[token]
        except KeyError:
            raise InputError("unknown response_url") from None

    # -- buttons ----------------------------------------------------------------------------

    def click_message(
        self,
        user_id: str,
        channel_id: str,
        ts: str,
        block_index: int,
        element_index: int,
        choice: str | None = None,
    ) -> None:
        user = self._user(user_id)
        try:
            message = self.workspace.message(channel_id, ts)
        except NotFoundError:
            raise InputError("that message no longer exists") from None
        if message.ephemeral_for not in (None, user.id):
            raise InputError("that message is not visible to you")
        element, block_id = _element(message.blocks, block_index, element_index)
        if element.get("type") == "feedback_buttons":
            # thumbs up / down: the click carries the chosen button's value
            chosen = element.get(f"{choice}_button")
            if choice not in ("positive", "negative") or not isinstance(chosen, dict):
                raise InputError("choose positive or negative")
            element = {**element, "value": chosen.get("value", "")}
        container = {
            "type": "message",
            "message_ts": message.ts,
            "channel_id": channel_id,
            "is_ephemeral": message.ephemeral_for is not None,
        }
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
        channel = self.workspace.channels[channel_id]
        payload = self._actions_payload(user, element, block_id, container)
        payload["channel"] = {"id": channel.id, "name": channel.name}
        payload["message"] = message.as_api()
        payload["response_url"] = self._new_hook(user.id, channel.id, message.ts)
        self._spawn(user.id, channel.id, self._interaction(payload, user.id, channel.id))

    def click_home(self, user_id: str, block_index: int, element_index: int) -> None:
        user = self._user(user_id)
        home = self.workspace.homes.get(user.id)
        if home is None:
            raise InputError("no Home view")
        element, block_id = _element(home.get("blocks", []), block_index, element_index)
        container = {"type": "view", "view_id": "VHOME" + user.id}
        payload = self._actions_payload(user, element, block_id, container)
        payload["view"] = {**home, "id": "VHOME" + user.id, "team_id": TEAM_ID, "app_id": APP_ID}
        dm = self.workspace.dm_of(user.id).id
        self._spawn(user.id, dm, self._interaction(payload, user.id, dm))

    def _actions_payload(
        self, user: User, element: dict[str, Any], block_id: str, container: dict[str, Any]
    ) -> dict[str, Any]:
        action: dict[str, Any] = {
            "action_id": element.get("action_id", ""),
            "block_id": block_id,
            "type": element.get("type", "button"),
            "action_ts": f"{time.time():.6f}",
        }
        for key in ("value", "text", "style", "url"):
            if key in element:
                action[key] = element[key]
        return {
            "type": "block_actions",
            "user": {"id": user.id, "username": user.name, "name": user.name, "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": "sandbox",
            "container": container,
            "trigger_id": self.workspace.new_trigger(user.id),
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "enterprise": None,
            "is_enterprise_install": False,
            "actions": [action],
        }

    async def _interaction(self, payload: dict[str, Any], user: str, channel: str) -> None:
        response = await self.delivery.interaction(payload)
        self._check(response, user, channel, "The click was not delivered")

    # -- modals -----------------------------------------------------------------------------

    def submit_view(self, user_id: str, view_id: str, values: dict[str, Any]) -> None:
        user = self._user(user_id)
        opened = self._own_view(user, view_id)
        state = _state_values(opened.view, values)
        opened.busy = True
        self.workspace.changed()
        payload = {
            "type": "view_submission",
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "user": {"id": user.id, "username": user.name, "name": user.name, "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": "sandbox",
            "trigger_id": self.workspace.new_trigger(user.id),
            "view": {
                **opened.view,
                "id": opened.id,
                "team_id": TEAM_ID,
                "app_id": APP_ID,
                "bot_id": "B0OPSBOT",
                "state": {"values": state},
                "hash": "sandbox",
            },
            "response_urls": [],
            "is_enterprise_install": False,
        }
        dm = self.workspace.dm_of(user.id).id

        async def run() -> None:
            try:
                response = await self.delivery.interaction(payload)
            finally:
                opened.busy = False
                self.workspace.changed()
            if not self._check(response, user.id, dm, "The form was not submitted"):
                return
            self._apply_ack(opened, response.json() or {})

        self._spawn(user.id, dm, run())

    def _apply_ack(self, opened: OpenView, ack: dict[str, Any]) -> None:
        action = ack.get("response_action")
        if action == "errors":
            errors = ack.get("errors") or {}
            opened.errors = {str(k): str(v) for k, v in errors.items()}
            self.workspace.changed()
        elif action == "update" and isinstance(ack.get("view"), dict):
            self.workspace.update_view(opened.id, ack["view"])
        elif action == "push" and isinstance(ack.get("view"), dict):
            self.workspace.open_view(opened.user, ack["view"], push=True)
        elif action == "clear":
            self.workspace.close_all_views(opened.user)
        else:
            self.workspace.close_view(opened.id)

    def close_view(self, user_id: str, view_id: str) -> None:
        user = self._user(user_id)
        opened = self._own_view(user, view_id)
        self.workspace.close_view(opened.id)
        if not opened.view.get("notify_on_close"):
            return
        payload = {
            "type": "view_closed",
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "user": {"id": user.id, "username": user.name, "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "view": {**opened.view, "id": opened.id, "team_id": TEAM_ID, "app_id": APP_ID},
            "is_cleared": False,
        }
        dm = self.workspace.dm_of(user.id).id
        self._spawn(user.id, dm, self._interaction(payload, user.id, dm))

    def _own_view(self, user: User, view_id: str) -> OpenView:
        try:
            opened = self.workspace.find_view(view_id)
        except NotFoundError:
            raise InputError("that form is closed") from None
        if opened.user != user.id:
            raise InputError("that form is not yours")
        return opened

    # -- agent sessions -----------------------------------------------------------------------

    def stop_session(self, user_id: str, channel_id: str, thread_ts: str) -> None:
        """The person clicks Stop on a run in progress: Slack sends ``agent_session_stopped``.
        Slack shows Stop while the session is ``processing``; the sandbox also shows it while
        ``suspended`` (waiting on an approval), so a waiting run can be stopped and its
        approvals withdrawn."""
        user = self._user(user_id)
        session = self.workspace.sessions.get((channel_id, thread_ts))
        if session is None or session.get("status") not in STOPPABLE:
            raise InputError("nothing is running in that thread")
        event = {
            "type": "agent_session_stopped",
            "user": user.id,
            "channel": channel_id,
            "thread_ts": thread_ts,
            "event_ts": f"{time.time():.6f}",
        }
        self._spawn(user.id, channel_id, self._event(event, user.id, channel_id))

    # -- App Home ---------------------------------------------------------------------------

    def open_home(self, user_id: str, tab: str) -> None:
        user = self._user(user_id)
        dm = self.workspace.dm_of(user.id)
        event: dict[str, Any] = {
            "type": "app_home_opened",
            "user": user.id,
            "channel": dm.id,
            "tab": tab,
            "event_ts": f"{time.time():.6f}",
        }
        if tab == "home" and user.id in self.workspace.homes:
            event["view"] = {**self.workspace.homes[user.id], "id": "VHOME" + user.id}
        self._spawn(user.id, dm.id, self._event(event, user.id, dm.id))

    # -- what the UI shows ----------------------------------------------------------------

    def state(self, user_id: str) -> dict[str, Any]:
        user = self._user(user_id)
        ws = self.workspace
        channels = [c.info() for c in ws.channels.values() if not c.is_im or c.im_user == user.id]
        stack = ws.modals.get(user.id) or []
        modal = stack[-1] if stack else None
        return {
            "version": ws.version,
            "me": user.id,
            "team": {"id": TEAM_ID, "domain": TEAM_DOMAIN},
            "bot": {"id": BOT_USER_ID, "name": BOT_NAME},
            "users": [
                {
                    "id": u.id,
                    "name": u.name,
                    "real_name": u.real_name,
                    "groups": list(u.groups),
                    "is_bot": u.is_bot,
                }
                for u in ws.users.values()
            ]
            + [{"id": SLACKBOT_ID, "name": "slackbot", "real_name": "Slackbot", "is_bot": True}],
            "channels": channels,
            "messages": [
                _ui_message(m)
                for m in ws.visible_to(user.id)
                if any(c["id"] == m.channel for c in channels)
            ],
            "statuses": [
                {"channel": c, "thread_ts": t, "status": s} for (c, t), s in ws.statuses.items()
            ],
            "modal": None
            if modal is None
            else {"id": modal.id, "view": modal.view, "errors": modal.errors, "busy": modal.busy},
            "home": ws.homes.get(user.id),
            "prompts": ws.prompts,
            "sessions": [
                {"channel": c, "thread_ts": t, **session}
                for (c, t), session in ws.sessions.items()
                if any(ch["id"] == c for ch in channels)
            ],
            "titles": [
                {"channel": c, "thread_ts": t, "title": title}
                for (c, t), title in ws.titles.items()
                if any(ch["id"] == c for ch in channels)
            ],
        }


def _ui_message(m: Message) -> dict[str, Any]:
    return {
        "channel": m.channel,
        "ts": m.ts,
        "user": m.user,
        "text": m.text,
        "blocks": m.blocks,
        "thread_ts": m.thread_ts,
        "ephemeral": m.ephemeral_for is not None,
        "edited": m.edited,
        "stream": None if m.stream is None else m.stream.as_ui(),
    }


def _element(
    blocks: list[dict[str, Any]], block_index: int, element_index: int
) -> tuple[dict[str, Any], str]:
    """The interactive element a click hit; Slack names a block without ``block_id``."""
    try:
        block = blocks[block_index]
        element = (
            block["accessory"] if element_index < 0 else block.get("elements", [])[element_index]
        )
    except (IndexError, KeyError, TypeError):
        raise InputError("no such button") from None
    if not isinstance(element, dict) or element.get("type") not in (
        "button",
        "static_select",
        "feedback_buttons",
    ):
        raise InputError("not an interactive element")
    return element, str(block.get("block_id") or f"b{block_index}")


def _state_values(view: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The UI's raw input values → Slack's ``view.state.values`` for the view's input blocks."""
    state: dict[str, Any] = {}
    for index, block in enumerate(view.get("blocks", [])):
        if block.get("type") != "input":
            continue
        element = block.get("element") or {}
        block_id = str(block.get("block_id") or f"b{index}")
        action_id = str(element.get("action_id") or "value")
        raw = values.get(block_id)
        kind = element.get("type")
        entry: dict[str, Any] = {"type": kind}
        if kind == "static_select":
            options = {str(o.get("value")): o for o in element.get("options", [])}
            entry["selected_option"] = options.get(str(raw)) if raw not in (None, "") else None
        else:
            entry["value"] = None if raw in (None, "") else str(raw)
        state[block_id] = {action_id: entry}
    return state
