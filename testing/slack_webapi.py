"""The subset of Slack's Web API the bot calls, answered from a ``Workspace``
(``testing.slack_workspace``): the one fake Slack, served by the sandbox and, to tests and
benches, by ``testing.slack.FakeSlack``.

``WebApi.call(method, params, token)`` answers as Slack does, ``{"ok": true, ...}`` or
``{"ok": false, "error": ...}``; the HTTP wire (``POST /api/<method>``, form or JSON, bearer
token) is the caller's (``sandbox.web``, ``testing.slack``). Limits Slack enforces
(``testing.slack_api``) are enforced here, so the sandbox and the tests fail where Slack would.
"""

from __future__ import annotations

import hmac
from collections import deque
from collections.abc import Callable
from typing import Any

from testing.slack_api import (
    Params,
    check_call,
)
from testing.slack_workspace import (
    APP_ID,
    BOT_ID,
    BOT_NAME,
    BOT_USER_ID,
    TEAM_DOMAIN,
    TEAM_ID,
    NotFoundError,
    StreamError,
    Workspace,
)

CALLS_KEPT = 1000  # the most recent calls, for tests and debugging
Result = dict[str, Any]


class WebApi:
    """Dispatches Web API methods to the workspace; ``calls`` keeps the latest (method, params)."""

    def __init__(self, workspace: Workspace, bot_token: str) -> None:
        self.workspace = workspace
        self._bot_token = bot_token
        self.calls: deque[tuple[str, Params]] = deque(maxlen=CALLS_KEPT)
        self._methods: dict[str, Callable[[Params], Result]] = {
            "api.test": lambda p: {"ok": True, "args": p},
            "auth.test": self.auth_test,
            "chat.postMessage": self.chat_post_message,
            "chat.update": self.chat_update,
            "chat.delete": self.chat_delete,
            "chat.postEphemeral": self.chat_post_ephemeral,
            "views.open": self.views_open,
            "views.push": self.views_push,
            "views.update": self.views_update,
            "views.publish": self.views_publish,
            "users.info": self.users_info,
            "conversations.info": self.conversations_info,
            "assistant.threads.setStatus": self.set_status,
            "assistant.threads.setSuggestedPrompts": self.set_suggested_prompts,
            "assistant.threads.setTitle": self.set_title,
            "chat.startStream": self.start_stream,
            "chat.appendStream": self.append_stream,
            "chat.stopStream": self.stop_stream,
            "agents.sessions.setStatus": self.set_session_status,
        }

    def call(self, method: str, params: Params, token: str | None) -> Result:
        given = (token or "").encode("utf-8", "surrogatepass")  # any text a request can hold
        if not token or not hmac.compare_digest(given, self._bot_token.encode()):
            return {"ok": False, "error": "not_authed" if not token else "invalid_auth"}
        handler = self._methods.get(method)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        self.calls.append((method, params))
        problem = check_call(method, params)
        if problem:
            return {"ok": False, "error": problem}
        try:
            return handler(params)
        except NotFoundError as exc:
            return {"ok": False, "error": _not_found(method), "detail": str(exc)}
        except StreamError as exc:
            error = str(exc) if str(exc).startswith("message_not") else "invalid_chunks"
            return {"ok": False, "error": error, "detail": str(exc)}

    # -- methods --------------------------------------------------------------------------

    def auth_test(self, _p: Params) -> Result:
        return {
            "ok": True,
            "url": f"https://{TEAM_DOMAIN}.slack.invalid/",
            "team": "opsbot sandbox",
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def chat_post_message(self, p: Params) -> Result:
        channel = self.workspace.resolve_channel(str(p["channel"]))
        thread_ts = str(p["thread_ts"]) if p.get("thread_ts") else None
        message = self.workspace.post(
            channel.id, BOT_USER_ID, str(p.get("text") or ""), p.get("blocks"), thread_ts=thread_ts
        )
        return {"ok": True, "channel": channel.id, "ts": message.ts, "message": message.as_api()}

    def chat_update(self, p: Params) -> Result:
        channel = self.workspace.resolve_channel(str(p.get("channel", "")))
        message = self.workspace.message(channel.id, str(p.get("ts", "")))
        if message.user != BOT_USER_ID:
            return {"ok": False, "error": "cant_update_message"}
        blocks = p.get("blocks")
        self.workspace.update(
            channel.id,
            message.ts,
            str(p.get("text") or ""),
            message.blocks if blocks is None else blocks,
        )
        return {"ok": True, "channel": channel.id, "ts": message.ts, "text": message.text}

    def chat_delete(self, p: Params) -> Result:
        channel = self.workspace.resolve_channel(str(p.get("channel", "")))
        message = self.workspace.message(channel.id, str(p.get("ts", "")))
        if message.user != BOT_USER_ID:
            return {"ok": False, "error": "cant_delete_message"}
        self.workspace.delete(channel.id, message.ts)
        return {"ok": True, "channel": channel.id, "ts": message.ts}

    def chat_post_ephemeral(self, p: Params) -> Result:
        user = str(p.get("user", ""))
        if not self.workspace.is_member(user):
            return {"ok": False, "error": "user_not_found"}
        channel = self.workspace.resolve_channel(str(p.get("channel", "")))
        thread_ts = str(p["thread_ts"]) if p.get("thread_ts") else None
        message = self.workspace.post(
            channel.id,
            BOT_USER_ID,
            str(p.get("text") or ""),
            p.get("blocks"),
            thread_ts=thread_ts,
            ephemeral_for=user,
        )
        return {"ok": True, "message_ts": message.ts}

    def views_open(self, p: Params) -> Result:
        return self._open(p, push=False)

    def views_push(self, p: Params) -> Result:
        return self._open(p, push=True)

    def _open(self, p: Params, *, push: bool) -> Result:
        user = self.workspace.use_trigger(str(p.get("trigger_id", "")))
        view = p["view"]
        opened = self.workspace.open_view(user, view, push=push)
        return {"ok": True, "view": _view_object(opened.id, view)}

    def views_update(self, p: Params) -> Result:
        view = p["view"]
        view_id = str(p.get("view_id") or "")
        if not view_id and p.get("external_id"):
            view_id = self._by_external_id(str(p["external_id"]))
        opened = self.workspace.update_view(view_id, view)
        return {"ok": True, "view": _view_object(opened.id, view)}

    def _by_external_id(self, external_id: str) -> str:
        for stack in self.workspace.modals.values():
            for opened in stack:
                if opened.view.get("external_id") == external_id:
                    return opened.id
        raise NotFoundError(external_id)

    def views_publish(self, p: Params) -> Result:
        view = p["view"]
        self.workspace.publish_home(str(p.get("user_id", "")), view)
        return {"ok": True, "view": _view_object("VHOME" + str(p.get("user_id")), view)}

    def users_info(self, p: Params) -> Result:
        user = self.workspace.users.get(str(p.get("user", "")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": user.profile()}

    def conversations_info(self, p: Params) -> Result:
        channel = self.workspace.resolve_channel(str(p.get("channel", "")))
        return {"ok": True, "channel": channel.info()}

    def set_status(self, p: Params) -> Result:
        # Only DMs with the app are assistant threads (as on Slack).
        channel = self.workspace.channel(str(p.get("channel_id", "")))
        if channel is None or not channel.is_im:
            return {"ok": False, "error": "channel_not_found"}
        self.workspace.set_status(channel.id, str(p.get("thread_ts", "")), str(p.get("status")))
        return {"ok": True}

    def set_suggested_prompts(self, p: Params) -> Result:
        channel = self.workspace.channel(str(p.get("channel_id", "")))
        if channel is None or not channel.is_im:
            return {"ok": False, "error": "channel_not_found"}
        prompts = {"title": p.get("title", ""), "prompts": p["prompts"]}
        self.workspace.prompts[channel.id] = prompts
        self.workspace.changed()
        return {"ok": True}

    # -- thread titles, streams and agent sessions ------------------------------------------

    def set_title(self, p: Params) -> Result:
        channel = self.workspace.channel(str(p.get("channel_id", "")))
        if channel is None or not channel.is_im:
            return {"ok": False, "error": "channel_not_found"}
        title = str(p["title"]).strip()
        self.workspace.titles[(channel.id, str(p["thread_ts"]))] = title
        self.workspace.changed()
        return {"ok": True}

    def start_stream(self, p: Params) -> Result:
        channel = self.workspace.resolve_channel(str(p.get("channel", "")))
        thread_ts = str(p["thread_ts"])
        if not channel.is_im and not (p.get("recipient_user_id") and p.get("recipient_team_id")):
            # outside a DM Slack needs to know whom the stream is for
            return {"ok": False, "error": "missing_recipient_user_id"}
        message = self.workspace.start_stream(
            channel.id, thread_ts, _text(p, "markdown_text"), _chunks(p)
        )
        return {"ok": True, "channel": channel.id, "ts": message.ts}

    def append_stream(self, p: Params) -> Result:
        channel = self.workspace.resolve_channel(str(p.get("channel", "")))
        message = self.workspace.append_stream(
            channel.id, str(p.get("ts", "")), _text(p, "markdown_text"), _chunks(p)
        )
        return {"ok": True, "channel": channel.id, "ts": message.ts}

    def stop_stream(self, p: Params) -> Result:
        channel = self.workspace.resolve_channel(str(p.get("channel", "")))
        blocks = p.get("blocks")
        message = self.workspace.stop_stream(
            channel.id,
            str(p.get("ts", "")),
            _text(p, "markdown_text"),
            _chunks(p),
            blocks if isinstance(blocks, list) else None,
        )
        status = p.get("session_status")  # ends the agent session's turn in the same call
        if isinstance(status, str) and status and message.thread_ts:
            self.workspace.set_session(channel.id, message.thread_ts, status, None)
        return {"ok": True, "channel": channel.id, "ts": message.ts, "message": message.as_api()}

    def set_session_status(self, p: Params) -> Result:
        channel = self.workspace.channel(str(p.get("channel_id", "")))
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        status = str(p["status"])
        title = p.get("title")
        self.workspace.set_session(
            channel.id,
            str(p.get("thread_ts") or ""),
            status,
            title if isinstance(title, str) else None,
        )
        return {"ok": True}


def _text(p: Params, key: str) -> str | None:
    value = p.get(key)
    return value if isinstance(value, str) and value else None


def _chunks(p: Params) -> list[Any] | None:
    chunks = p.get("chunks")  # decoded by decode_params, a list when check_call passed it
    return chunks if isinstance(chunks, list) else None


def _not_found(method: str) -> str:
    if method.startswith("views."):
        return "not_found" if method != "views.open" else "invalid_trigger_id"
    if method in ("chat.update", "chat.delete"):
        return "message_not_found"
    return "channel_not_found"


def _view_object(view_id: str, view: dict[str, Any]) -> dict[str, Any]:
    return {**view, "id": view_id, "team_id": TEAM_ID, "app_id": APP_ID, "hash": "sandbox"}
