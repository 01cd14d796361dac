"""The sandbox's Teams side: the seeded people as Teams users of one tenant, talking to the
production Teams app through ``testing.teams.FakeTeams`` (the Bot Connector's part: signed
activities in, the ``/v3/conversations`` calls recorded), and what each person's Teams
client would show.

Three conversations: each person's personal chat with opsbot, the team's General channel
(the bot hears only @mentions) and the approvals channel. An approval card's buttons are
Teams' user-specific view: a person listed in the card's ``refresh.userIds`` sees the card
the bot answers to the refresh invoke, everyone else the card as posted (read-only).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from infra.json_input import parse_json
from infra.settings import Settings, TeamsSettings
from sandbox.emulator import InputError
from testing.slack_workspace import User
from testing.teams import APPROVALS_CHANNEL_ID, CHANNEL_ID, TENANT_ID, FakeTeams, TeamsUser

log = logging.getLogger(__name__)
CARD = "application/vnd.microsoft.card.adaptive"
MESSAGE_CHARS = 28_000  # about what Teams takes in one message (its limit is ~28 KB)
TYPING_SECONDS = 4.0  # how long Teams shows "typing" after one typing activity
PLACES = {"chat": "Chat with opsbot", "general": "General", "approvals": "ops-approvals"}
_NAMESPACE = uuid.UUID("6f0a3d4e-5b1c-4e8a-9d2f-0c7b1a2e3f40")


def teams_user(user: User) -> TeamsUser:
    """The seeded person as Teams shows them: a stable Entra object id per username."""
    return TeamsUser(str(uuid.uuid5(_NAMESPACE, user.name)), user.real_name, TENANT_ID)


def with_fake_teams(settings: Settings, fake: FakeTeams) -> Settings:
    """``settings`` with the Teams app pointed at ``fake`` (its token issuer, Connector API and
    approvals channel), and approval cards on both platforms (the first decision wins)."""
    return settings.model_copy(
        update={
            "teams": TeamsSettings(
                app_id=fake.app_id,
                app_password=SecretStr(fake.app_password),
                tenant_id=fake.tenant_id,
                openid_metadata_url=fake.openid_metadata_url,
                token_url=fake.token_url,
                approvals_conversation_id=APPROVALS_CHANNEL_ID,
                approvals_service_url=fake.service_url,
            ),
            "approvals": settings.approvals.model_copy(
                update={"card_platforms": ["slack", "teams"]}
            ),
        }
    )


@dataclass
class Said:
    """A message a person posted (the fake channel records only the bot's)."""

    conversation: str
    id: str
    user: str
    text: str


@dataclass
class TeamsChat:
    fake: FakeTeams
    people: dict[str, User]  # username → the seeded person
    app_url: str
    said: list[Said] = field(default_factory=list)
    # (username, message key) → (digest of the card as posted, that person's view of it)
    _views: dict[tuple[str, str], tuple[str, dict[str, Any]]] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        everyone = [teams_user(u) for u in self.people.values()]
        for channel in (CHANNEL_ID, APPROVALS_CHANNEL_ID):
            self.fake.members[channel] = list(everyone)

    def _person(self, username: str) -> TeamsUser:
        user = self.people.get(username)
        if user is None:
            raise InputError(f"unknown user {username!r}")
        return teams_user(user)

    def _conversation(self, username: str, place: str) -> str:
        if place == "chat":
            return self.fake.personal_conversation_id(self._person(username))
        if place == "general":
            return CHANNEL_ID
        if place == "approvals":
            return APPROVALS_CHANNEL_ID
        raise InputError(f"unknown conversation {place!r}")

    # -- what a person does --------------------------------------------------------------

    def say(self, username: str, place: str, text: str, thread: str | None) -> None:
        """Post ``text``; in a channel only an @opsbot message reaches the bot (as in Teams)."""
        person = self._person(username)
        text = text.strip()
        if not text:
            raise InputError("text is required")
        if len(text) > MESSAGE_CHARS:
            raise InputError(f"a Teams message holds at most {MESSAGE_CHARS:,} characters")
        if place == "chat":
            activity = self.fake.personal(person, text)
        else:
            channel = self._conversation(username, place)
            mentioned = text.startswith("@opsbot")
            body = text.removeprefix("@opsbot").strip()
            activity = self.fake.mention(person, body, channel_id=channel, thread_id=thread)
            if not mentioned:  # a post for people only: the bot never sees it
                activity["text"] = text
                activity["entities"] = []
        self.said.append(Said(activity["conversation"]["id"], activity["id"], username, text))
        if place == "chat" or activity["entities"]:
            self._spawn(self._deliver(activity))

    async def click(
        self, username: str, key: str, verb: str, data: dict[str, Any]
    ) -> dict[str, Any] | str:
        """An ``Action.Execute`` on message ``key``: the clicker's new view of the card, or
        the text the bot answered with (an error or a note)."""
        person = self._person(username)
        conversation, activity_id = self._message_ref(key)
        activity = self.fake.card_action(person, conversation, activity_id, verb, data)
        answer = await self._invoke(activity)
        if isinstance(answer, dict):
            self._views[(username, key)] = (self._digest(key), answer)
        return answer

    async def _deliver(self, activity: dict[str, Any]) -> None:
        # In the background, like Teams: a refusal is for the terminal, the page goes on.
        try:
            status, body = await self.fake.post_activity(self.app_url, activity)
        except OSError as exc:
            log.warning("the Teams app is not answering: %s", exc)
            return
        if status >= 400:
            log.warning("the Teams app answered %s: %s", status, body[:200])

    async def _invoke(self, activity: dict[str, Any]) -> dict[str, Any] | str:
        status, body = await self.fake.post_activity(self.app_url, activity)
        with contextlib.suppress(ValueError):
            answer = parse_json(body)
            if not isinstance(answer, dict):  # a JSON list or string was a 500 on the page
                answer = {}
            value = answer.get("value")
            if answer.get("type") == CARD and isinstance(value, dict):
                return value
            if isinstance(value, dict):
                return str(value.get("message") or value)
            if isinstance(value, str):
                return value
        return f"The Teams app answered {status}."

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def idle(self) -> None:
        """Until every activity sent so far has been answered by the app (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    # -- what a person sees --------------------------------------------------------------

    def _message_ref(self, key: str) -> tuple[str, str]:
        channel, _, activity_id = key.rpartition("|")
        if (channel, activity_id) not in self.fake.messages:
            raise InputError(f"no message {key!r}")
        return self.fake.posted_to.get((channel, activity_id), channel), activity_id

    def _digest(self, key: str) -> str:
        channel, _, activity_id = key.rpartition("|")
        posted = self.fake.messages.get((channel, activity_id), {})
        return hashlib.sha256(json.dumps(posted, sort_keys=True).encode()).hexdigest()

    async def _view(self, username: str, key: str, content: dict[str, Any]) -> dict[str, Any]:
        """The card as ``username`` sees it: refreshed for them when they are listed in its
        ``refresh.userIds`` (once per version of the card), else as posted. A refresh the app
        did not answer with a card (it refuses a card whose post it has not recorded yet) is
        asked again at the next look, as Teams does when the card is shown again."""
        digest = self._digest(key)
        seen = self._views.get((username, key))
        if seen is not None and seen[0] == digest:
            return seen[1]
        refresh = content.get("refresh") or {}
        action = refresh.get("action") or {}
        view = content
        if self._person(username).mri in (refresh.get("userIds") or []) and action.get("verb"):
            conversation, activity_id = self._message_ref(key)
            activity = self.fake.card_action(
                self._person(username),
                conversation,
                activity_id,
                str(action["verb"]),
                dict(action.get("data") or {}),
                trigger="automatic",
            )
            answer = await self._invoke(activity)
            if not isinstance(answer, dict):
                return content
            view = answer
        self._views[(username, key)] = (digest, view)
        return view

    async def state(self, username: str) -> dict[str, Any]:
        person = self._person(username)
        places = {p: self._conversation(username, p) for p in PLACES}
        messages: dict[str, list[dict[str, Any]]] = {p: [] for p in PLACES}
        where = {conversation: place for place, conversation in places.items()}
        for said in self.said:
            place = where.get(said.conversation.split(";")[0])
            if place is not None:
                name = self.people[said.user].real_name
                messages[place].append(
                    _entry(said.conversation, said.id, name, said.text, [], said.user == username)
                )
        for (channel, activity_id), posted in list(self.fake.messages.items()):
            place = where.get(channel)
            if place is None:
                continue
            key = f"{channel}|{activity_id}"
            cards = [
                await self._view(username, key, a.get("content") or {})
                for a in posted.get("attachments") or []
                if a.get("contentType") == CARD
            ]
            conversation = self.fake.posted_to.get((channel, activity_id), channel)
            entry = _entry(conversation, activity_id, "opsbot", posted.get("text") or "", cards)
            entry["key"] = key
            messages[place].append(entry)
        for entries in messages.values():
            entries.sort(key=lambda m: int(m["id"]) if m["id"].isdigit() else 0)
        return {
            "me": {"username": username, "name": person.name, "mri": person.mri},
            "people": [{"username": u.name, "name": u.real_name} for u in self.people.values()],
            "places": [{"id": p, "name": name} for p, name in PLACES.items()],
            "messages": messages,
            "typing": [p for p, c in places.items() if self._typing(c)],
        }

    def _typing(self, conversation: str) -> bool:
        """A typing activity in the last few seconds with no message after it."""
        now = time.perf_counter()
        for call in reversed(self.fake.calls):
            if call.conversation_id.split(";")[0] != conversation:
                continue
            if call.kind not in ("send", "reply", "create"):
                continue
            kind = call.message.get("type", "message")
            if kind == "typing":
                return now - call.at < TYPING_SECONDS
            if kind == "message":
                return False
        return False


def _entry(
    conversation: str, activity_id: str, who: str, text: str, cards: list[Any], mine: bool = False
) -> dict[str, Any]:
    _, _, root = conversation.partition(";messageid=")
    return {
        "id": activity_id,
        "root": root or activity_id,
        "from": who,
        "text": text,
        "cards": cards,
        "mine": mine,
    }
