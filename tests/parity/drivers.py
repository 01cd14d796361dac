"""One small driver per chat adapter, so each parity scenario runs against Slack and Teams
through their fakes, over real HTTP against the running app (the contract-suite pattern).

A driver speaks for the platform: it sends a person's message as that platform would
(signed Slack events; Bot Connector JWTs and activities), forges each kind of bad
credential, and reads back what the bot posted where people see it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.teams.core import ChatUser
from testing.slack import FakeSlack, SlackSender, direct_message, mention
from testing.teams import OTHER_TENANT_ID, FakeTeams, TeamsUser

PEOPLE = ("alice", "bob", "erin")  # erin is never linked


@dataclass
class Sent:
    """One delivery: the HTTP status the platform got, where the answer goes (``where``), and
    the exact request, so a test can deliver it again."""

    status: int
    who: str
    where: tuple[str, ...]
    request: dict[str, Any] = field(default_factory=dict)


class Driver(Protocol):
    platform: str

    def chat_user(self, who: str) -> ChatUser: ...

    async def mention(self, who: str, text: str, *, in_thread_of: Sent | None = None) -> Sent:
        """``@opsbot text`` in a channel (a new thread, or a reply in ``in_thread_of``'s)."""
        ...

    async def personal(self, who: str, text: str) -> Sent:
        """A message in the person's 1:1 conversation with opsbot."""
        ...

    async def redeliver(self, sent: Sent) -> int:
        """The platform delivers the same request again (a retry)."""
        ...

    async def stop(self, who: str, sent: Sent) -> int:
        """``who`` presses Stop on ``sent``'s thread (Slack: the agent session's Stop button;
        Teams, which has none: "stop" in the thread)."""
        ...

    async def forged(self, who: str, text: str, kind: str) -> int | None:
        """A mention with a bad credential of ``kind``; ``None`` if the platform has no such
        thing (Slack has no serviceUrl)."""
        ...

    def refusal_statuses(self, kind: str) -> set[int]:
        """The HTTP status(es) the app answers for ``kind``."""
        ...

    async def answers(self, sent: Sent, count: int = 1) -> list[str]:
        """Wait until the bot posted ``count`` messages where ``sent``'s answer goes; their
        visible content (text and cards), oldest first."""
        ...

    async def sign_in_link(self, who: str) -> str:
        """Wait for the sign-in prompt shown to ``who`` alone; the login URL it opens."""
        ...

    async def connect_button(self, who: str) -> tuple[str, str]:
        """Wait for the *Connect <server>* prompt shown to ``who`` alone; its button's label
        and the URL it opens."""
        ...

    def everything_seen(self) -> str:
        """Every call the bot made to the platform so far, as it sent it (JSON)."""
        ...

    async def settle(self) -> None: ...

    def bot_calls(self) -> int:
        """How many calls the bot made to the platform's API so far."""
        ...


# -- Slack ------------------------------------------------------------------------------


SLACK_USERS = {"alice": "U0ALICE", "bob": "U0BOB", "erin": "U0ERIN"}
SLACK_CHANNEL = "C0GENERAL"


@dataclass
class SlackDriver:
    fake: FakeSlack
    sender: SlackSender
    app_url: str
    platform: str = "slack"
    _ts: int = 0

    def chat_user(self, who: str) -> ChatUser:
        return ChatUser("slack", self.sender.team_id, SLACK_USERS[who])

    def _next_ts(self) -> str:
        self._ts += 1
        return f"{int(time.time())}.{self._ts:06d}"

    async def mention(self, who: str, text: str, *, in_thread_of: Sent | None = None) -> Sent:
        ts = self._next_ts()
        thread = in_thread_of.where[1] if in_thread_of else None
        event = mention(SLACK_USERS[who], text, channel=SLACK_CHANNEL, ts=ts, thread_ts=thread)
        envelope = self.sender.envelope(event)
        status, _ = await self.sender.post_raw(json.dumps(envelope))
        return Sent(status, who, (SLACK_CHANNEL, thread or ts), envelope)

    async def personal(self, who: str, text: str) -> Sent:
        ts = self._next_ts()
        channel = "D" + SLACK_USERS[who][1:]
        event = direct_message(SLACK_USERS[who], text, channel=channel, ts=ts)
        envelope = self.sender.envelope(event)
        status, _ = await self.sender.post_raw(json.dumps(envelope))
        return Sent(status, who, (channel, ts), envelope)

    async def stop(self, who: str, sent: Sent) -> int:
        channel, thread_ts = sent.where
        event = {
            "type": "agent_session_stopped",
            "user": SLACK_USERS[who],
            "channel": channel,
            "thread_ts": thread_ts,
            "event_ts": self._next_ts(),
            "team": self.sender.team_id,
        }
        status, _ = await self.sender.post_raw(json.dumps(self.sender.envelope(event)))
        return status

    async def redeliver(self, sent: Sent) -> int:
        status, _ = await self.sender.post_raw(
            json.dumps(sent.request), headers={"X-Slack-Retry-Num": "1"}
        )
        return status

    async def forged(self, who: str, text: str, kind: str) -> int | None:
        event = mention(SLACK_USERS[who], text, channel=SLACK_CHANNEL, ts=self._next_ts())
        body = json.dumps(self.sender.envelope(event))
        if kind == "forged":
            status, _ = await self.sender.post_raw(body, signature_override="v0=" + "0" * 64)
        elif kind == "expired":
            status, _ = await self.sender.post_raw(body, timestamp=int(time.time()) - 600)
        elif kind == "wrong_audience":  # signed for another Slack app
            other = SlackSender(self.app_url, signing_secret="another-apps-secret")
            status, _ = await other.post_raw(body)
        elif kind == "wrong_tenant":
            stranger = SlackSender(self.app_url, team_id="T0STRANGER")
            event = mention(SLACK_USERS[who], text, channel=SLACK_CHANNEL, team="T0STRANGER")
            status, _ = await stranger.post_raw(json.dumps(stranger.envelope(event)))
        else:
            return None
        return status

    def refusal_statuses(self, kind: str) -> set[int]:
        # Slack's retries stop on a 2xx: another workspace's event is acknowledged and ignored.
        return {200} if kind == "wrong_tenant" else {401}

    def _visible(self, message: dict[str, Any]) -> str:
        return f"{message.get('text', '')}\n{json.dumps(message.get('blocks') or [])}"

    async def answers(self, sent: Sent, count: int = 1) -> list[str]:
        channel, thread = sent.where

        def ready(_p: dict[str, Any]) -> bool:
            found = [m for m in self.fake.thread(channel, thread) if not _working(m)]
            return len(found) >= count

        await self.fake.wait_for("chat.postMessage", where=ready)
        await self.fake.settle(quiet=0.2)
        return [self._visible(m) for m in self.fake.thread(channel, thread) if not _working(m)]

    async def sign_in_link(self, who: str) -> str:
        user = SLACK_USERS[who]
        (prompt,) = await self.fake.wait_for(
            "chat.postEphemeral", where=lambda p: p["user"] == user
        )
        for block in prompt.get("blocks") or []:
            for element in block.get("elements") or []:
                if element.get("url"):
                    return str(element["url"])
        raise AssertionError("the Connect prompt has no link")

    async def connect_button(self, who: str) -> tuple[str, str]:
        user = SLACK_USERS[who]
        (prompt,) = await self.fake.wait_for(
            "chat.postEphemeral", where=lambda p: p["user"] == user
        )
        buttons = [
            element
            for block in prompt.get("blocks") or []
            for element in block.get("elements") or []
            if element.get("type") == "button" and element.get("url")
        ]
        assert len(buttons) == 1, prompt
        return buttons[0]["text"]["text"], buttons[0]["url"]

    def everything_seen(self) -> str:
        return json.dumps([c.params for c in self.fake.calls])

    async def settle(self) -> None:
        await self.fake.settle(quiet=0.2)

    def bot_calls(self) -> int:
        return len([c for c in self.fake.calls if c.method != "auth.test"])


def _working(message: dict[str, Any]) -> bool:
    return str(message.get("text", "")).startswith("Working on it")


# -- Teams ------------------------------------------------------------------------------


@dataclass
class TeamsDriver:
    fake: FakeTeams
    app_url: str
    people: dict[str, TeamsUser]
    platform: str = "teams"

    def chat_user(self, who: str) -> ChatUser:
        user = self.people[who]
        return ChatUser("teams", user.tenant_id, user.aad_object_id)

    async def _post(self, activity: dict[str, Any], **kwargs: Any) -> int:
        status, _ = await self.fake.post_activity(self.app_url, activity, **kwargs)
        return status

    async def mention(self, who: str, text: str, *, in_thread_of: Sent | None = None) -> Sent:
        root = in_thread_of.where[0].partition(";messageid=")[2] if in_thread_of else None
        activity = self.fake.mention(self.people[who], text, thread_id=root)
        status = await self._post(activity)
        return Sent(status, who, (activity["conversation"]["id"],), activity)

    async def personal(self, who: str, text: str) -> Sent:
        activity = self.fake.personal(self.people[who], text)
        status = await self._post(activity)
        return Sent(status, who, (activity["conversation"]["id"],), activity)

    async def redeliver(self, sent: Sent) -> int:
        return await self._post(sent.request)

    async def stop(self, who: str, sent: Sent) -> int:
        return (await self.mention(who, "stop", in_thread_of=sent)).status

    async def forged(self, who: str, text: str, kind: str) -> int | None:
        fake = self.fake
        activity = fake.mention(self.people[who], text)
        tokens = {
            "forged": lambda: fake.token(key=fake.foreign_key()),
            "expired": lambda: fake.token(expires_in=-600),
            "wrong_audience": lambda: fake.token(audience="another-bot-app-id"),
            "wrong_serviceurl": lambda: fake.token(service_url="https://smba.example.net/"),
            "wrong_tenant": fake.token,
        }
        if kind not in tokens:
            return None
        if kind == "wrong_tenant":
            activity["channelData"]["tenant"]["id"] = OTHER_TENANT_ID
            activity["conversation"]["tenantId"] = OTHER_TENANT_ID
        return await self._post(activity, token=tokens[kind]())

    def refusal_statuses(self, kind: str) -> set[int]:
        return {401}

    async def answers(self, sent: Sent, count: int = 1) -> list[str]:
        conversation = sent.where[0]
        await self.fake.wait_for("posted", count, where=lambda c: c.conversation_id == conversation)
        await self.fake.settle(quiet=0.2)
        return [c.text for c in self.fake.posted() if c.conversation_id == conversation]

    async def sign_in_link(self, who: str) -> str:
        user = self.people[who]
        personal = self.fake.personal_conversation_id(user)
        (call,) = await self.fake.wait_for(
            "posted",
            where=lambda c: c.conversation_id == personal and bool(c.cards),
        )
        for card in call.cards:
            for action in card.get("actions") or []:
                if action.get("type") == "Action.OpenUrl":
                    return str(action["url"])
        raise AssertionError("the sign-in card has no link")

    async def connect_button(self, who: str) -> tuple[str, str]:
        personal = self.fake.personal_conversation_id(self.people[who])
        (call,) = await self.fake.wait_for(
            "posted", where=lambda c: c.conversation_id == personal and bool(c.cards)
        )
        (card,) = call.cards  # an Adaptive Card: Teams has no other kind of button
        (action,) = card["actions"]
        assert action["type"] == "Action.OpenUrl", action
        return action["title"], action["url"]

    def everything_seen(self) -> str:
        return json.dumps([c.body for c in self.fake.calls])

    async def settle(self) -> None:
        await self.fake.settle(quiet=0.2)

    def bot_calls(self) -> int:
        return len(self.fake.calls)


__all__ = ["PEOPLE", "Driver", "Sent", "SlackDriver", "TeamsDriver"]
