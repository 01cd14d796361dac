"""``opsbot slack``: the command's server (HTTP on a port, the in-process expiry sweeper's
notices in Slack, the link callback) wired from Settings."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

import aiohttp

from bot.slack.core import Decided, DecisionNotifier, Refused
from infra.settings import Settings
from opsbot.commands.slack import serve_slack
from testing.fake_assistant import FakeAssistant
from testing.slack import (
    APP_TOKEN,
    APPROVALS_CHANNEL_ID,
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    SlackSender,
    mention,
)
from tests.bot.conftest import ALICE
from tests.bot.test_slack_events import _texts
from tests.fixtures.full_stack import serving_slack


class SweepingAssistant(FakeAssistant):
    """The fake core plus a sweeper that expires everything pending when told to."""

    expire_now: asyncio.Event

    async def sweep_forever(
        self, interval: float, notify: DecisionNotifier, *, platform: str | None = None
    ) -> None:
        await self.expire_now.wait()
        for approval_id, view in list(self.approvals.items()):
            if view.status == "pending":
                self.approvals[approval_id] = replace(view, status="expired")
                await notify(
                    Decided(
                        approval_id,
                        "expired",
                        "expiry (no decision in time)",
                        "expired",
                        view.requester_ref,
                        Refused("Your request was not carried out."),
                    )
                )


async def test_opsbot_slack_serves_http_and_posts_expiry_notices(
    fake_slack: FakeSlack, sqlite_url: str
) -> None:
    assistant = SweepingAssistant()
    assistant.expire_now = asyncio.Event()
    assistant.link(ALICE, "alice", {"team-payments"})
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SIGNING_SECRET,
        slack_api_url=fake_slack.url,
        database_url=sqlite_url,
    )

    @contextlib.asynccontextmanager
    async def factory(_settings: Settings) -> AsyncIterator[SweepingAssistant]:
        yield assistant

    async with (
        serving_slack(settings, assistant_factory=factory) as url,
        aiohttp.ClientSession() as session,
    ):
        sender = SlackSender(url, session=session)
        status, _ = await sender.post_event(
            mention(ALICE.user_id, "update PAY-1 status=closed", channel="C0PAY", ts="5.1")
        )
        assert status == 200
        await fake_slack.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals"
        )
        await fake_slack.settle()  # the card's location is saved after it is posted
        assistant.expire_now.set()
        await fake_slack.wait_for(
            "chat.update", where=lambda p: p["channel"] == APPROVALS_CHANNEL_ID
        )
        told = await fake_slack.wait_for("chat.postMessage", where=lambda p: "expired" in p["text"])
    (card_key,) = [k for k in fake_slack.messages if k[0] == APPROVALS_CHANNEL_ID]
    card = fake_slack.messages[card_key]
    assert "Expired" in _texts(card["blocks"])
    assert all(b["type"] != "actions" for b in card["blocks"])
    assert told[0]["channel"] == "C0PAY"
    assert told[0]["thread_ts"] == "5.1"
    assert "before an approver decided it" in _texts(told[0]["blocks"])


async def test_opsbot_slack_socket_mode_answers_over_the_websocket(
    fake_slack: FakeSlack, fake_assistant: FakeAssistant, sqlite_url: str
) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SIGNING_SECRET,
        slack_app_token=APP_TOKEN,
        slack_api_url=fake_slack.url,
        database_url=sqlite_url,
    )

    @contextlib.asynccontextmanager
    async def factory(_settings: Settings) -> AsyncIterator[FakeAssistant]:
        yield fake_assistant

    stop = asyncio.Event()
    server = asyncio.create_task(
        serve_slack(
            settings,
            socket_mode=True,
            host="127.0.0.1",
            port=0,
            stop=stop,
            assistant_factory=factory,
        )
    )
    try:
        envelope = SlackSender("unused").envelope(mention(ALICE.user_id, "via socket", ts="6.1"))
        ack = await fake_slack.send_socket_event(envelope, wait=20)
        assert "envelope_id" in ack
        update = (await fake_slack.wait_for("chat.update"))[0]
    finally:
        stop.set()
        await asyncio.wait_for(server, 20)
    assert "via socket" in _texts(update["blocks"])
