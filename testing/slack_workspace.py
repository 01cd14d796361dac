"""The emulated Slack workspace: users, channels, messages, views — all in memory.

One ``Workspace`` holds what a real workspace would: the demo users (from the dev IdP's
directory), ``#ops`` and ``#ops-approvals``, a DM with the bot per user, messages and threads,
ephemeral messages, modals and App Home views. ``version`` grows on every change so the web UI
can poll cheaply.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from testing.slack_api import STREAM_TEXT_LIMIT, TASK_STATUSES

TEAM_ID = "T0SANDBOX"
TEAM_DOMAIN = "sandbox"
APP_ID = "A0OPSBOT"
BOT_USER_ID = "U0OPSBOT"
BOT_ID = "B0OPSBOT"
BOT_NAME = "opsbot"
# Slack's trigger ids die after 3 s; the sandbox allows 10 so that a busy laptop or CI
# machine does not turn a slow views.open into a flaky failure. They still work only once.
TRIGGER_TTL_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class User:
    id: str
    name: str  # the directory subject (alice), also the Slack handle
    real_name: str
    email: str
    groups: tuple[str, ...] = ()
    is_bot: bool = False

    def profile(self) -> dict[str, Any]:
        """``users.info``'s user object."""
        return {
            "id": self.id,
            "team_id": TEAM_ID,
            "name": self.name,
            "real_name": self.real_name,
            "is_bot": self.is_bot,
            "deleted": False,
            "profile": {
                "real_name": self.real_name,
                "display_name": self.name,
                "email": self.email,
            },
        }


@dataclass(frozen=True, slots=True)
class Channel:
    id: str
    name: str
    im_user: str | None = None  # set for a DM with the bot: the human's user id

    @property
    def is_im(self) -> bool:
        return self.im_user is not None

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "is_channel": not self.is_im,
            "is_im": self.is_im,
            **({"user": self.im_user} if self.im_user else {}),
        }


@dataclass(slots=True)
class Message:
    channel: str
    ts: str
    user: str
    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    thread_ts: str | None = None
    ephemeral_for: str | None = None
    edited: bool = False
    # A streamed message (chat.startStream … stopStream): what the chunks built so far.
    stream: Stream | None = None

    def as_api(self) -> dict[str, Any]:
        """The message object as the Web API and interaction payloads show it."""
        message: dict[str, Any] = {
            "type": "message",
            "ts": self.ts,
            "user": self.user,
            "text": self.text,
            "blocks": self.blocks,
            "team": TEAM_ID,
        }
        if self.user == BOT_USER_ID:
            message.update(bot_id=BOT_ID, app_id=APP_ID)
        if self.thread_ts:
            message["thread_ts"] = self.thread_ts
        if self.stream is not None and not self.text:
            message["text"] = self.stream.text
        return message


class StreamError(ValueError):
    """A chunk Slack would refuse (the Web API answers ``invalid_chunks``)."""


@dataclass(slots=True)
class Stream:
    """What a streamed message shows: its markdown, its task entries (by id, in the order
    they first came) and plan title; ``open`` until ``chat.stopStream``."""

    text: str = ""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan: str | None = None
    open: bool = True
    # Every chunk the stream took, in order (markdown text sent on its own as a
    # ``markdown_text`` chunk): what the tests read.
    chunks: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, markdown: str | None, chunks: list[Any] | None) -> None:
        """Check every chunk first (a refused call changes nothing), then apply them."""
        checked = [{"type": "markdown_text", "text": markdown}] if markdown else []
        for chunk in chunks or []:
            if not isinstance(chunk, dict) or chunk.get("type") not in (
                "markdown_text",
                "task_update",
                "plan_update",
            ):
                raise StreamError(f"unknown chunk {chunk!r:.80}")
            if chunk["type"] == "task_update" and (
                not chunk.get("id") or chunk.get("status") not in TASK_STATUSES
            ):
                raise StreamError("a task_update needs an id and a known status")
            checked.append(chunk)
        text = sum(len(str(c.get("text") or "")) for c in checked)
        if text > STREAM_TEXT_LIMIT:  # in one call, all chunks together
            raise StreamError(f"{text} characters of markdown in one call")
        self.chunks.extend(checked)
        for chunk in checked:
            if chunk["type"] == "markdown_text":
                self.text += str(chunk.get("text") or "")
            elif chunk["type"] == "plan_update":
                self.plan = str(chunk.get("title") or "")
            else:
                task = self.tasks.setdefault(str(chunk["id"]), {"id": str(chunk["id"])})
                task.update({k: v for k, v in chunk.items() if k != "type"})

    def as_ui(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tasks": list(self.tasks.values()),
            "plan": self.plan,
            "open": self.open,
        }


@dataclass(slots=True)
class OpenView:
    """A modal open for one user (a stack per user, top last)."""

    id: str
    user: str
    view: dict[str, Any]
    errors: dict[str, str] = field(default_factory=dict)
    busy: bool = False


class NotFoundError(KeyError):
    """A channel, message, view or trigger that does not exist (Web API: ``*_not_found``)."""


@dataclass
class Workspace:
    """One workspace's state. ``open_world`` (the tests' ``testing.slack.FakeSlack``) takes
    any channel, thread, trigger or user it has not seen as existing, because tests make up
    their ids; the sandbox's workspace is closed and refuses them as Slack would."""

    users: dict[str, User] = field(default_factory=dict)
    channels: dict[str, Channel] = field(default_factory=dict)
    messages: dict[tuple[str, str], Message] = field(default_factory=dict)
    modals: dict[str, list[OpenView]] = field(default_factory=dict)
    homes: dict[str, dict[str, Any]] = field(default_factory=dict)
    statuses: dict[tuple[str, str], str] = field(default_factory=dict)
    prompts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # agents.sessions.setStatus and assistant.threads.setTitle, by (channel, thread ts)
    sessions: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    titles: dict[tuple[str, str], str] = field(default_factory=dict)
    # every status each agent session was given, in order (``sessions`` holds the latest)
    session_statuses: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    open_world: bool = False
    version: int = 0
    _triggers: dict[str, tuple[str, float]] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def demo(
        cls,
        people: Iterable[User],
        approvals_channel: str = "ops-approvals",
        *,
        open_world: bool = False,
    ) -> Workspace:
        ws = cls(open_world=open_world)
        bot = User(BOT_USER_ID, BOT_NAME, "opsbot", "opsbot@sandbox.invalid", is_bot=True)
        ws.users[bot.id] = bot
        for person in people:
            ws.users[person.id] = person
            dm = Channel("D" + person.id[1:], BOT_NAME, im_user=person.id)
            ws.channels[dm.id] = dm
        for channel in (Channel("C0OPS", "ops"), Channel("C0APPROVALS", approvals_channel)):
            ws.channels[channel.id] = channel
        return ws

    # -- lookups --------------------------------------------------------------------------

    def changed(self) -> None:
        self.version += 1

    def humans(self) -> list[User]:
        return [u for u in self.users.values() if not u.is_bot]

    def dm_of(self, user_id: str) -> Channel:
        for channel in self.channels.values():
            if channel.im_user == user_id:
                return channel
        raise NotFoundError(user_id)

    def resolve_channel(self, ref: str) -> Channel:
        """A channel by id, by ``name``/``#name``, or a user id (their DM with the bot)."""
        if ref in self.channels:
            return self.channels[ref]
        name = ref.lstrip("#")
        for channel in self.channels.values():
            if not channel.is_im and channel.name == name:
                return channel
        if ref in self.users and not self.users[ref].is_bot:
            return self.dm_of(ref)
        if not self.open_world or not ref:
            raise NotFoundError(ref)
        if ref.startswith("U"):  # posting to a user id opens the DM with them
            return self._add_channel(Channel("D" + ref[1:], BOT_NAME, im_user=ref))
        if ref.startswith("D"):
            return self._add_channel(Channel(ref, BOT_NAME, im_user="U" + ref[1:]))
        return self._add_channel(Channel(ref, name.lower()))

    def channel(self, channel_id: str) -> Channel | None:
        """The channel with this id (in an open world, any id names one)."""
        try:
            if not self.open_world:
                return self.channels.get(channel_id)
            return self.resolve_channel(channel_id)
        except NotFoundError:
            return None

    def _add_channel(self, channel: Channel) -> Channel:
        self.channels[channel.id] = channel
        return channel

    def is_member(self, user: str) -> bool:
        return user in self.users or (self.open_world and bool(user))

    def message(self, channel: str, ts: str) -> Message:
        try:
            return self.messages[(channel, ts)]
        except KeyError:
            raise NotFoundError(f"{channel}/{ts}") from None

    def next_ts(self) -> str:
        return f"{int(time.time())}.{next(self._seq):06d}"

    # -- messages -------------------------------------------------------------------------

    def post(
        self,
        channel: str,
        user: str,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        *,
        thread_ts: str | None = None,
        ephemeral_for: str | None = None,
    ) -> Message:
        message = Message(
            channel, self.next_ts(), user, text, list(blocks or []), thread_ts, ephemeral_for
        )
        known = (channel, thread_ts) in self.messages
        if thread_ts is not None and not known and not self.open_world:
            raise NotFoundError(f"thread {channel}/{thread_ts}")
        self.messages[(channel, message.ts)] = message
        self.changed()
        return message

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> Message:
        message = self.message(channel, ts)
        message.text, message.blocks, message.edited = text, list(blocks), True
        self.changed()
        return message

    def delete(self, channel: str, ts: str) -> None:
        self.message(channel, ts)
        del self.messages[(channel, ts)]
        self.changed()

    def visible_to(self, user: str) -> list[Message]:
        return sorted(
            (m for m in self.messages.values() if m.ephemeral_for in (None, user)),
            key=lambda m: float(m.ts),
        )

    # -- streams and agent sessions ----------------------------------------------------------

    def start_stream(
        self, channel: str, thread_ts: str, markdown: str | None, chunks: list[Any] | None
    ) -> Message:
        stream = Stream()
        stream.apply(markdown, chunks)
        message = self.post(channel, BOT_USER_ID, "", thread_ts=thread_ts)
        message.stream = stream
        return message

    def append_stream(
        self, channel: str, ts: str, markdown: str | None, chunks: list[Any] | None
    ) -> Message:
        message = self.message(channel, ts)
        if message.stream is None or not message.stream.open:
            raise StreamError("message_not_in_streaming_state")
        message.stream.apply(markdown, chunks)
        self.changed()
        return message

    def stop_stream(
        self,
        channel: str,
        ts: str,
        markdown: str | None,
        chunks: list[Any] | None,
        blocks: list[dict[str, Any]] | None,
    ) -> Message:
        message = self.append_stream(channel, ts, markdown, chunks)
        assert message.stream is not None
        message.stream.open = False
        message.text = message.stream.text
        if blocks:
            message.blocks = list(blocks)
        self.changed()
        return message

    def set_session(self, channel: str, thread_ts: str, status: str, title: str | None) -> None:
        session = self.sessions.setdefault((channel, thread_ts), {})
        session["status"] = status
        self.session_statuses.setdefault((channel, thread_ts), []).append(status)
        if title:
            session["title"] = title
        self.changed()

    def set_status(self, channel: str, thread_ts: str, status: str) -> None:
        if status:
            self.statuses[(channel, thread_ts)] = status
        else:
            self.statuses.pop((channel, thread_ts), None)
        self.changed()

    # -- triggers and views ---------------------------------------------------------------

    def new_trigger(self, user: str) -> str:
        now = time.monotonic()
        for stale in [t for t, (_u, deadline) in self._triggers.items() if deadline < now]:
            del self._triggers[stale]
        trigger = f"{next(self._seq)}.{int(time.time())}.{secrets.token_hex(8)}"
        self._triggers[trigger] = (user, now + TRIGGER_TTL_SECONDS)
        return trigger

    def use_trigger(self, trigger_id: str) -> str:
        """The user a trigger belongs to; a trigger works once, within its lifetime."""
        if self.open_world and trigger_id and trigger_id not in self._triggers:
            return ""  # a trigger a test made up: from someone this workspace does not know
        user, deadline = self._triggers.pop(trigger_id, ("", 0.0))
        if not user or time.monotonic() > deadline:
            raise NotFoundError(trigger_id)
        return user

    def open_view(self, user: str, view: dict[str, Any], *, push: bool = False) -> OpenView:
        opened = OpenView("V" + secrets.token_hex(5).upper(), user, dict(view))
        stack = self.modals.setdefault(user, [])
        if not push:
            stack.clear()
        stack.append(opened)
        self.changed()
        return opened

    def find_view(self, view_id: str) -> OpenView:
        for stack in self.modals.values():
            for opened in stack:
                if opened.id == view_id:
                    return opened
        raise NotFoundError(view_id)

    def update_view(self, view_id: str, view: dict[str, Any]) -> OpenView:
        opened = self.find_view(view_id)
        opened.view, opened.errors, opened.busy = dict(view), {}, False
        self.changed()
        return opened

    def close_view(self, view_id: str) -> None:
        for stack in self.modals.values():
            stack[:] = [v for v in stack if v.id != view_id]
        self.changed()

    def close_all_views(self, user: str) -> None:
        self.modals.pop(user, None)
        self.changed()

    def publish_home(self, user: str, view: dict[str, Any]) -> None:
        if not self.is_member(user):
            raise NotFoundError(user)
        self.homes[user] = dict(view)
        self.changed()
