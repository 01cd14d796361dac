"""Approval parts of the parity drivers: how each platform shows an approval card and how a
person clicks Approve, Edit and Reject on it (Slack: buttons, a modal; Teams: Action.Execute
invokes answered with a card), read back as the text that person or everyone sees."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from testing.slack import (
    APPROVALS_CHANNEL_ID as SLACK_APPROVALS,
)
from testing.slack import (
    block_action,
    card_decided,
    number_value,
    select_value,
    text_value,
    view_submission,
)
from testing.teams import APPROVALS_CHANNEL_ID as TEAMS_APPROVALS
from testing.teams import ConnectorCall
from tests.parity.drivers import SLACK_USERS, Driver, Sent, SlackDriver, TeamsDriver


@dataclass
class Card:
    """A posted approval card: its approval id and the platform's handle on it."""

    approval_id: str
    handle: Any


class ApprovalDriver(Protocol):
    base: Driver

    async def request_write(self, who: str, text: str) -> tuple[Sent, Card]:
        """``who`` asks for a write; the card in the approvals channel once it is posted."""
        ...

    async def click(self, who: str, card: Card, verb: str, reason: str | None = None) -> str:
        """``verb`` approve | reject on ``card``; what the clicker is shown (may be empty)."""
        ...

    async def edit(self, who: str, card: Card, status: str, priority: str) -> str:
        """Approve with edits (status, priority); what the clicker is shown (field errors)."""
        ...

    async def card_now(self, card: Card) -> str:
        """Everyone's copy of the card, once it shows a decision."""
        ...


@dataclass
class SlackApprovals:
    base: SlackDriver

    async def request_write(self, who: str, text: str) -> tuple[Sent, Card]:
        fake = self.base.fake
        sent = await self.base.mention(who, text)
        await fake.wait_for("chat.postMessage", where=lambda p: p["channel"] == "ops-approvals")
        await fake.settle(quiet=0.2)
        (key,) = [k for k in fake.messages if k[0] == SLACK_APPROVALS]
        message = fake.messages[key]
        buttons = [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]
        return sent, Card(str(buttons[0]["value"]), message["ts"])

    async def click(self, who: str, card: Card, verb: str, reason: str | None = None) -> str:
        fake, user = self.base.fake, SLACK_USERS[who]
        before = len(fake.calls_to("chat.postEphemeral"))
        action = {"approve": "approval_approve", "reject": "approval_reject"}[verb]
        status, _ = await self.base.sender.post_interaction(
            block_action(user, action, card.approval_id, message_ts=card.handle)
        )
        assert status == 200
        if verb == "reject":  # Slack asks for the reason in a modal
            (opened,) = (await fake.wait_for("views.open"))[-1:]
            status, body = await self.base.sender.post_interaction(
                view_submission(user, opened["view"], {"reason": text_value(reason)})
            )
            assert status == 200, body
        await fake.settle(quiet=0.3)
        shown = [
            p["text"] for p in fake.calls_to("chat.postEphemeral")[before:] if p["user"] == user
        ]
        return "\n".join(shown)

    async def edit(self, who: str, card: Card, status: str, priority: str) -> str:
        fake, user = self.base.fake, SLACK_USERS[who]
        await self.base.sender.post_interaction(
            block_action(user, "approval_edit", card.approval_id, message_ts=card.handle)
        )
        modal = (await fake.wait_for("views.open"))[-1]["view"]
        values = {
            "arg:ticket_id": text_value("PAY-1"),
            "arg:status": select_value(json.dumps(status)),
            "arg:priority": number_value(priority),
            "arg:comment": text_value(None),
        }
        code, body = await self.base.sender.post_interaction(view_submission(user, modal, values))
        assert code == 200
        return body

    async def card_now(self, card: Card) -> str:
        fake = self.base.fake
        await fake.wait_for("chat.update", where=card_decided)
        await fake.settle(quiet=0.2)
        message = fake.messages[(SLACK_APPROVALS, card.handle)]
        return f"{message.get('text', '')}\n{json.dumps(message.get('blocks'))}"


@dataclass
class TeamsApprovalsDriver:
    base: TeamsDriver

    async def request_write(self, who: str, text: str) -> tuple[Sent, Card]:
        fake = self.base.fake
        sent = await self.base.mention(who, text)
        (created,) = await fake.wait_for(
            "create", where=lambda c: c.conversation_id.startswith(TEAMS_APPROVALS)
        )
        await fake.settle(quiet=0.2)  # its location is saved once Teams answered the post
        data = created.cards[0]["refresh"]["action"]["data"]
        return sent, Card(str(data["approval_id"]), created)

    async def _invoke(self, who: str, card: Card, verb: str, data: dict[str, Any]) -> str:
        created: ConnectorCall = card.handle
        user = self.base.people[who]
        root = created.conversation_id.partition(";messageid=")[2]
        activity = {
            "type": "invoke",
            "name": "adaptiveCard/action",
            "id": f"f:{root}:{verb}:{who}:{len(self.base.fake.calls)}",
            "channelId": "msteams",
            "serviceUrl": self.base.fake.service_url,
            "from": {"id": user.mri, "name": user.name, "aadObjectId": user.aad_object_id},
            "recipient": {"id": f"28:{self.base.fake.app_id}"},
            "conversation": {
                "id": created.conversation_id,
                "conversationType": "channel",
                "isGroup": True,
                "tenantId": user.tenant_id,
            },
            "channelData": {"tenant": {"id": user.tenant_id}},
            "replyToId": root,
            "value": {
                "action": {
                    "type": "Action.Execute",
                    "verb": verb,
                    "data": {**created.cards[0]["refresh"]["action"]["data"], **data},
                },
                "trigger": "manual",
            },
        }
        status, body = await self.base.fake.post_activity(self.base.app_url, activity)
        assert status == 200, body
        answer = json.loads(body)
        assert answer["statusCode"] == 200, answer
        return json.dumps(answer["value"], ensure_ascii=False)

    async def click(self, who: str, card: Card, verb: str, reason: str | None = None) -> str:
        data = {"reject_reason": reason} if reason else {}
        return await self._invoke(who, card, verb, data)

    async def edit(self, who: str, card: Card, status: str, priority: str) -> str:
        return await self._invoke(
            who,
            card,
            "edit",
            {"arg.ticket_id": "PAY-1", "arg.status": status, "arg.priority": priority},
        )

    async def card_now(self, card: Card) -> str:
        created: ConnectorCall = card.handle
        root = created.conversation_id.partition(";messageid=")[2]
        (update,) = (
            await self.base.fake.wait_for("update", where=lambda c: c.activity_id == root)
        )[-1:]
        return update.text


def approvals_for(driver: Driver) -> ApprovalDriver:
    if isinstance(driver, SlackDriver):
        return SlackApprovals(driver)
    assert isinstance(driver, TeamsDriver)
    return TeamsApprovalsDriver(driver)
