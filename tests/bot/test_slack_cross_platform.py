"""`opsbot slack` and approvals handled on another platform (Teams): the notices the core
publishes reach Slack's copy of the card through the running server's notice loop.

- an approval requested on Teams gets a (mirrored) Slack card with the buttons;
- decided on Teams: the Slack card shows the decision, and nothing is posted to a requester
  thread on Slack (the requester is on Teams: the Teams adapter tells them);
- a Slack approval decided on Teams: the Slack card shows it and alice is told in her thread;
- a later Slack click changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import aiohttp
import pytest

from assistant.types import (
    Answer,
    Answered,
    ApprovalNotice,
    ApprovalView,
    ChatUser,
    Decided,
    PlatformRef,
)
from infra.settings import Settings
from testing.fake_assistant import UPDATE_TICKET_SCHEMA, FakeAssistant
from testing.slack import (
    APPROVALS_CHANNEL_ID,
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    SlackSender,
    block_action,
    card_decided,
    mention,
)
from tests.bot.conftest import ALICE, BOB
from tests.bot.test_slack_events import _texts
from tests.fixtures.full_stack import serving_slack

pytestmark = pytest.mark.timeout(60)

CAROL_ON_TEAMS = ChatUser("teams", "tenant-1", "aad-carol")
TEAMS_THREAD = PlatformRef("teams", "tenant-1", "19:ops@thread.tacv2;messageid=17", "17")


def teams_request(assistant: FakeAssistant, approval_id: str) -> ApprovalView:
    view = ApprovalView(
        approval_id=approval_id,
        tool="ticketing_update_ticket",
        server="ticketing",
        args={"ticket_id": "PAY-7", "status": "closed"},
        requester="carol@example.com",
        requester_chat_user=CAROL_ON_TEAMS,
        requester_ref=TEAMS_THREAD,
        reads=["ticketing_get_ticket PAY-7"],
        expires_at=assistant.now + timedelta(hours=1),
        input_schema=UPDATE_TICKET_SCHEMA,
    )
    assistant.approvals[approval_id] = view
    return view


def decided_on_teams(approval_id: str, ref: PlatformRef) -> Decided:
    return Decided(
        approval_id,
        "approved",
        "bob@example.com",
        "succeeded",
        ref,
        Answered(Answer("Closed PAY-7.")),
        state="succeeded",
    )


@contextlib.asynccontextmanager
async def running_slack(
    fake_slack: FakeSlack, assistant: FakeAssistant, sqlite_url: str
) -> AsyncIterator[SlackSender]:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SIGNING_SECRET,
        slack_api_url=fake_slack.url,
        database_url=sqlite_url,
        approvals={"notice_poll_seconds": 0.05},
    )

    @contextlib.asynccontextmanager
    async def factory(_settings: Settings) -> AsyncIterator[FakeAssistant]:
        yield assistant

    async with (
        serving_slack(settings, assistant_factory=factory) as url,
        aiohttp.ClientSession() as session,
    ):
        yield SlackSender(url, session=session)


def _card(fake_slack: FakeSlack) -> dict[str, Any]:
    (key,) = [k for k in fake_slack.messages if k[0] == APPROVALS_CHANNEL_ID]
    return fake_slack.messages[key]


def _has_buttons(card: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in card["blocks"])


async def test_a_teams_approval_gets_a_slack_card_that_shows_the_teams_decision(
    fake_slack: FakeSlack, fake_assistant: FakeAssistant, sqlite_url: str
) -> None:
    teams_request(fake_assistant, "ap-t1")
    async with running_slack(fake_slack, fake_assistant, sqlite_url) as sender:
        fake_assistant.notify_platform("slack", ApprovalNotice("n1", "post", "ap-t1"))
        await fake_slack.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals"
        )
        await fake_slack.settle()
        card = _card(fake_slack)
        assert _has_buttons(card)
        assert "carol@example.com" in _texts(card["blocks"])

        # Bob approves on Teams (the core recorded it); Slack's copy is told.
        view = fake_assistant.approvals["ap-t1"]
        fake_assistant.approvals["ap-t1"] = replace(
            view, status="succeeded", state="succeeded", decided_by="bob@example.com"
        )
        fake_assistant.notify_platform(
            "slack",
            ApprovalNotice("n2", "decided", "ap-t1", decided_on_teams("ap-t1", TEAMS_THREAD)),
        )
        await fake_slack.wait_for("chat.update", where=card_decided)
        await fake_slack.settle()
        card = _card(fake_slack)
        assert not _has_buttons(card)
        text = _texts(card["blocks"])
        assert "Approved" in text
        assert "bob@example.com" in text
        # carol is on Teams: nothing was posted to a Slack thread for her
        posted = [
            p for p in fake_slack.calls_to("chat.postMessage") if p["channel"] != "ops-approvals"
        ]
        assert posted == []

        # A late Slack click changes nothing: the core says it is decided.
        status, _ = await sender.post_interaction(
            block_action(BOB.user_id, "approval_approve", "ap-t1", message_ts=card["ts"])
        )
        assert status == 200
        await fake_slack.settle()
        assert fake_assistant.executed == []
        assert not _has_buttons(_card(fake_slack))


async def test_a_slack_approval_decided_on_teams_updates_the_card_and_tells_alice(
    fake_slack: FakeSlack, fake_assistant: FakeAssistant, sqlite_url: str
) -> None:
    async with running_slack(fake_slack, fake_assistant, sqlite_url) as sender:
        await sender.post_event(
            mention(ALICE.user_id, "update PAY-1 status=closed", channel="C0PAY", ts="5.1")
        )
        await fake_slack.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals"
        )
        await fake_slack.settle()
        (approval_id,) = fake_assistant.approvals
        ref = PlatformRef("slack", ALICE.team_id, "C0PAY", "5.1")
        fake_assistant.notify_platform(
            "slack",
            ApprovalNotice("n1", "decided", approval_id, decided_on_teams(approval_id, ref)),
        )
        told = await fake_slack.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "C0PAY" and "approved" in p["text"]
        )
        assert told[0]["thread_ts"] == "5.1"
        assert not _has_buttons(_card(fake_slack))
