"""Socket Mode: the same app answers events delivered over the WebSocket, once each."""

from __future__ import annotations

import asyncio
import contextlib

from bot.slack import build_app, run_socket_mode
from infra.storage import create_engine
from testing.fake_assistant import FakeAssistant
from testing.slack import APP_TOKEN, FakeSlack, SlackSender, mention
from tests.bot.conftest import ALICE, slack_config


async def test_socket_mode_answers_and_deduplicates(
    fake_slack: FakeSlack, fake_assistant: FakeAssistant, sqlite_url: str
) -> None:
    engine = create_engine(sqlite_url)
    app = build_app(slack_config(fake_slack), fake_assistant, engine, socket_mode=True)
    stop = asyncio.Event()
    task = asyncio.create_task(run_socket_mode(app, APP_TOKEN, stop))
    try:
        envelope = SlackSender("unused").envelope(
            mention(ALICE.user_id, "over the socket", ts="1700000400.0001"), "EvSOCK1"
        )
        first = await fake_slack.send_socket_event(envelope)
        again = await fake_slack.send_socket_event(envelope)  # Slack's retry
        assert "envelope_id" in first
        assert "envelope_id" in again
        update = (await fake_slack.wait_for("chat.update"))[0]
        await fake_slack.settle()
        assert "over the socket" in update["blocks"][0]["text"]["text"]
        assert len(fake_assistant.messages) == 1
        assert len(fake_slack.calls_to("chat.update")) == 1
        assert fake_slack.calls_to("apps.connections.open")
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        await engine.dispose()
