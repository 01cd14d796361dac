"""A user's message for the assistant, read from a Slack request, and how far its answer got.

``user_message`` decides whether an Events API envelope is a message opsbot answers (a
mention, or a direct message from a person). The accept middleware decides it once, before
Bolt acks, and leaves the message in the Bolt context under ``ACCEPTED`` for the listener.

``Progress`` records the visible steps already taken for a message (the thread opened for
``/ops ask``, the working indicator), so a run retried after a crash reuses them instead of
posting them twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bot.slack.core import ChatUser

# Bolt context key under which the accept middleware leaves the message it accepted.
ACCEPTED = "opsbot_accepted_message"
_MENTION = re.compile(r"<@[A-Z0-9]+(\|[^>]*)?>")
_IGNORED_SUBTYPES = frozenset({"message_changed", "message_deleted", "bot_message"})


@dataclass(frozen=True, slots=True)
class UserMessage:
    """One question for the assistant.

    ``thread_ts`` is ``None`` for ``/ops ask``: the answer's thread is opened by quoting the
    question in ``channel``, and ``response_url`` tells the user if that is impossible.
    """

    chat_user: ChatUser
    team_id: str
    channel: str
    thread_ts: str | None
    text: str
    is_dm: bool
    response_url: str | None = None

    def to_payload(self) -> dict[str, Any]:
        return {
            "platform": self.chat_user.platform,
            "user_team": self.chat_user.team_id,
            "user": self.chat_user.user_id,
            "team": self.team_id,
            "channel": self.channel,
            "thread_ts": self.thread_ts,
            "text": self.text,
            "is_dm": self.is_dm,
            "response_url": self.response_url,
        }

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> UserMessage:
        thread_ts, response_url = p.get("thread_ts"), p.get("response_url")
        return cls(
            ChatUser(str(p["platform"]), str(p["user_team"]), str(p["user"])),
            str(p["team"]),
            str(p["channel"]),
            None if thread_ts is None else str(thread_ts),
            str(p["text"]),
            bool(p.get("is_dm")),
            None if response_url is None else str(response_url),
        )

    @property
    def user_key(self) -> str:
        """Whose run this is, for per-user run limits."""
        u = self.chat_user
        return f"{u.platform}:{u.team_id}:{u.user_id}"


@dataclass(slots=True)
class Progress:
    """What an earlier attempt at answering already showed in Slack."""

    thread_channel: str | None = None
    thread_ts: str | None = None
    placeholder_ts: str | None = None
    status_set: bool = False

    @property
    def indicator_shown(self) -> bool:
        return self.placeholder_ts is not None or self.status_set

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, p: Mapping[str, Any] | None) -> Progress:
        p = p or {}
        return cls(
            thread_channel=p.get("thread_channel"),
            thread_ts=p.get("thread_ts"),
            placeholder_ts=p.get("placeholder_ts"),
            status_set=bool(p.get("status_set")),
        )


def strip_mentions(text: str) -> str:
    return _MENTION.sub("", text).strip()


def _from_a_person(event: Mapping[str, Any]) -> bool:
    """Not a bot (ourselves included), an edit, a deletion or another non-user message."""
    return not (
        event.get("bot_id")
        or event.get("bot_profile")
        or event.get("subtype")
        or not event.get("user")
    )


def user_message(body: Mapping[str, Any]) -> UserMessage | None:
    """The question in an ``event_callback`` envelope, or ``None`` if opsbot does not answer
    this event. Whether the user's team is allowed is the adapter's call, not this one's."""
    if body.get("type") != "event_callback":
        return None
    event = body.get("event")
    if not isinstance(event, Mapping):
        return None
    kind = event.get("type")
    if kind == "message":
        if event.get("channel_type") != "im" or event.get("subtype") in _IGNORED_SUBTYPES:
            return None
    elif kind != "app_mention":
        return None
    if not _from_a_person(event) or not event.get("channel") or not event.get("ts"):
        return None
    home_team = body.get("team_id")
    user_team = event.get("user_team") or event.get("team") or home_team
    return UserMessage(
        ChatUser("slack", str(user_team or ""), str(event["user"])),
        str(home_team),
        str(event["channel"]),
        str(event.get("thread_ts") or event["ts"]),
        strip_mentions(str(event.get("text", ""))),
        is_dm=kind == "message",
    )
