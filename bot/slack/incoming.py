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
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from bot.slack.cards import APPROVE_ACTION_ID, EDIT_ACTION_ID, REJECT_ACTION_ID
from bot.slack.core import ChatUser
from bot.slack.modals import EDIT_CALLBACK_ID, REJECT_CALLBACK_ID, ModalContext
from bot.slack.streaming import FEEDBACK_ACTION_ID
from infra.characters import ID_PATTERN
from infra.json_input import parse_json

# Bolt context key under which the accept middleware leaves the message it accepted.
ACCEPTED = "opsbot_accepted_message"
# ... and the message it refused for its length (the listener says so, privately).
TOO_LONG = "opsbot_too_long_message"
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
    # The streamed answer's message (``chat.startStream``), appended to by a retry.
    stream_ts: str | None = None

    @property
    def indicator_shown(self) -> bool:
        return self.placeholder_ts is not None or self.status_set or self.stream_ts is not None

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
            stream_ts=p.get("stream_ts"),
        )


def clicked_by(body: Mapping[str, Any]) -> ChatUser:
    """Who clicked, from an interaction's body (a button, a modal's submit): their own team
    when Slack names it (an Enterprise Grid user's home workspace), else the body's team."""
    user = body["user"]
    team = user.get("team_id") or (body.get("team") or {}).get("id")
    return ChatUser("slack", str(team), str(user["id"]))


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


# -- the edge: every request body is screened here before Bolt sees it ----------------------
#
# ``screen`` turns a verified request body into ``Screened`` (a payload kind opsbot handles,
# with the fields its listeners and Bolt read checked and capped), ``Ignored`` (a kind opsbot
# does not handle: 200) or ``Malformed`` (a handled kind that is not what Slack sends: 400).
# A new listener adds its payload model here.

# Lengths are capped before anything reaches the database: a job id is "slack-" + the
# delivery id in a 128-character column, team ids go to 64-character columns. Ids hold no
# control character (``infra.characters``): an event id with a NUL failed its dedup insert on
# PostgreSQL with a 500.
MAX_DELIVERY_ID = 100
_Id = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=ID_PATTERN)]
_Ts = Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=ID_PATTERN)]
_Delivery = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_DELIVERY_ID, pattern=ID_PATTERN)
]
_Name = Annotated[str, StringConstraints(max_length=255)]
_Url = Annotated[str, StringConstraints(max_length=2000)]


class _Model(BaseModel):
    # Slack adds fields over time: unknown ones pass, the ones read here are typed.
    model_config = ConfigDict(extra="allow", frozen=True)


class _Ref(_Model):
    id: _Id
    team_id: _Id | None = None
    enterprise_id: _Id | None = None


class _Authorization(_Model):
    team_id: _Id | None = None
    user_id: _Id | None = None
    enterprise_id: _Id | None = None
    is_enterprise_install: bool | None = None


class _Envelope(_Model):
    """What Bolt reads from any payload to build its context."""

    enterprise: _Id | _Ref | None = None
    enterprise_id: _Id | None = None
    is_enterprise_install: bool | str | None = None
    is_ext_shared_channel: bool | None = None
    authorizations: list[_Authorization] | None = None
    team: _Id | _Ref | None = None
    team_id: _Id | None = None
    user: _Id | _Ref | None = None
    user_id: _Id | None = None
    channel: _Id | _Ref | None = None
    channel_id: _Id | None = None
    thread_ts: _Ts | None = None
    context_team_id: _Id | None = None
    context_enterprise_id: _Id | None = None
    function_execution_id: None = None  # opsbot has no workflow functions
    response_url: _Url | None = None
    response_urls: list[dict[str, Any]] | None = None


class _UrlVerification(_Model):
    type: Literal["url_verification"]
    challenge: Annotated[str, StringConstraints(max_length=512)]


class _Event(_Envelope):
    """An Events API event. ``user`` is required of a person's message (no bot, no subtype)."""

    type: _Name
    user: _Id | None = None  # a string in every kind handled here
    channel: _Id | None = None
    event_ts: _Ts | None = None
    ts: _Ts | None = None
    text: str | None = None
    subtype: _Name | None = None
    bot_id: _Id | None = None
    bot_profile: dict[str, Any] | None = None
    user_team: _Id | None = None
    channel_type: _Name | None = None
    tab: _Name | None = None
    trigger_id: _Delivery | None = None
    message: dict[str, Any] | None = None
    previous_message: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _a_persons_message_names_its_author(self) -> _Event:
        if self.type in ("app_mention", "message"):
            if self.channel is None or self.ts is None:
                raise ValueError(f"a {self.type} event needs channel and ts")
            if self.user is None and not (self.bot_id or self.subtype):
                raise ValueError(f"a {self.type} event needs a user")
        if self.type in ("user_connection", "user_connection_status_requested") and not self.user:
            raise ValueError(f"{self.type} needs a user")
        if self.type == "agent_session_stopped" and not (
            self.user and self.channel and self.thread_ts
        ):
            raise ValueError("agent_session_stopped needs user, channel and thread_ts")
        if self.type == "app_home_opened":
            if self.user is None:
                raise ValueError("app_home_opened needs a user")
            if self.tab == "messages" and self.channel is None:
                raise ValueError("app_home_opened on the messages tab needs a channel")
        return self


class _EventCallback(_Envelope):
    type: Literal["event_callback"]
    team_id: _Id
    event_id: _Delivery
    event: _Event


class _Action(_Model):
    action_id: _Name
    block_id: _Name | None = None
    value: Annotated[str, StringConstraints(max_length=2000)] | None = None
    type: _Name | None = None


class _Container(_Model):
    channel_id: _Id | None = None
    message_ts: _Ts | None = None


class _Interaction(_Envelope):
    """A click or a modal's submission: Slack names its user and team as objects, and the
    listeners read them so (``clicked_by``); a string team reached them and failed."""

    user: _Ref
    team: _Ref | None = None


class _BlockActions(_Interaction):
    type: Literal["block_actions"]
    actions: Annotated[list[_Action], Field(min_length=1, max_length=25)]
    container: _Container | None = None
    trigger_id: _Delivery | None = None
    view: dict[str, Any] | None = None
    message: dict[str, Any] | None = None


class _InputState(_Model):
    selected_option: dict[str, Any] | None = None  # a select's choice is an option object


class _State(_Model):
    values: dict[_Name, dict[_Name, _InputState]]


class _View(_Model):
    id: _Id | None = None
    type: _Name
    callback_id: _Name
    private_metadata: Annotated[str, StringConstraints(max_length=3000)] | None = None
    state: _State
    team_id: _Id | None = None
    app_installed_team_id: _Id | None = None


class _ViewSubmission(_Interaction):
    type: Literal["view_submission"]
    view: _View
    trigger_id: _Delivery | None = None


class _Command(_Envelope):
    command: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    team_id: _Id
    user_id: _Id
    channel_id: _Id
    text: str = ""
    trigger_id: _Delivery | None = None
    channel_name: _Name | None = None


@dataclass(frozen=True, slots=True)
class Screened:
    """A payload opsbot handles, checked; ``body`` is what Bolt will parse again."""

    kind: str
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Ignored:
    kind: str


@dataclass(frozen=True, slots=True)
class Malformed:
    kind: str
    problem: str


COMMANDS = frozenset({"/ops"})
EVENT_KINDS = frozenset(
    {
        "app_mention",
        "message",
        "app_home_opened",
        "user_connection",
        "user_connection_status_requested",
        "agent_session_stopped",
    }
)
INTERACTION_MODELS: dict[str, type[_Model]] = {
    "block_actions": _BlockActions,
    "view_submission": _ViewSubmission,
}
# Buttons whose value is an approval id.
ACTIONS_WITH_VALUE = frozenset(
    {APPROVE_ACTION_ID, EDIT_ACTION_ID, REJECT_ACTION_ID, FEEDBACK_ACTION_ID}
)
ACTIONS_OPENING_A_MODAL = frozenset({EDIT_ACTION_ID, REJECT_ACTION_ID})
# Modals whose submission carries opsbot's context in private_metadata.
VIEWS_WITH_CONTEXT = frozenset({EDIT_CALLBACK_ID, REJECT_CALLBACK_ID})


def parse_body(raw: str, content_type: str | None) -> object:
    """The body as Bolt will read it (``slack_bolt.request.internals.parse_body``); raises
    ``ValueError`` on a body that is neither JSON nor a form."""
    if not raw:
        return {}
    if content_type == "application/json" or raw.startswith("{"):
        return parse_json(raw)
    form = dict(urllib.parse.parse_qsl(raw, keep_blank_values=True))
    if "payload" in raw:
        payload = form.get("payload")
        return parse_json(payload) if payload is not None else {}
    return form


def screen(raw: str, content_type: str | None) -> Screened | Ignored | Malformed:
    try:
        body = parse_body(raw, content_type)
    except ValueError as exc:  # every malformed JSON (infra.json_input)
        return Malformed("body", f"not JSON or a form: {exc}")
    if not isinstance(body, dict):
        return Malformed("body", f"a JSON {type(body).__name__}, not an object")
    if "command" in body:
        if body["command"] not in COMMANDS:
            return Ignored(f"command {str(body['command'])[:64]}")
        return _check("command", _Command, body)
    kind = body.get("type")
    if kind == "url_verification":
        return _check("url_verification", _UrlVerification, body)
    if kind == "event_callback":
        event = body.get("event")
        event_kind = event.get("type") if isinstance(event, dict) else None
        if isinstance(event_kind, str) and event_kind not in EVENT_KINDS:
            return Ignored(f"event {event_kind[:64]}")
        return _check(f"event {event_kind}", _EventCallback, body)
    model = INTERACTION_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        return Ignored(str(kind)[:64] if kind is not None else "payload without a type")
    checked = _check(str(kind), model, body)
    if isinstance(checked, Screened) and kind == "block_actions":
        for action in body["actions"]:
            if action["action_id"] in ACTIONS_WITH_VALUE and not action.get("value"):
                return Malformed(str(kind), f"actions.{action['action_id']}.value: missing")
            if action["action_id"] in ACTIONS_OPENING_A_MODAL and not body.get("trigger_id"):
                return Malformed(str(kind), "trigger_id: missing (a modal cannot open)")
    if isinstance(checked, Screened) and kind == "view_submission":
        view = body["view"]
        if view["callback_id"] in VIEWS_WITH_CONTEXT:
            try:
                ModalContext.load(str(view.get("private_metadata") or ""))
            except ValueError:
                return Malformed(str(kind), "view.private_metadata: not opsbot's")
    return checked


def _check(kind: str, model: type[BaseModel], body: dict[str, Any]) -> Screened | Malformed:
    try:
        model.model_validate(body)
    except ValidationError as exc:
        return Malformed(kind, _first_problem(exc))
    return Screened(kind, body)


def _first_problem(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])[:120]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg'][:200]}{more}"
