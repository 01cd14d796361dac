"""Socket Mode: the same app answers events delivered over the WebSocket, once each."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from bot.slack import build_app, run_socket_mode
from bot.slack.server import ScreenedSocketModeHandler
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


class RecordingSocketClient:
    """The Socket Mode client's one method the handler answers through."""

    def __init__(self) -> None:
        self.acks: list[SocketModeResponse] = []
        self.logger = logging.getLogger("tests.socket_mode")

    async def send_socket_mode_response(self, response: SocketModeResponse) -> None:
        self.acks.append(response)


async def test_a_malformed_socket_mode_envelope_is_acked_and_ignored_with_one_line(
    fake_slack: FakeSlack,
    fake_assistant: FakeAssistant,
    sqlite_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Screened like an HTTP delivery: Bolt never sees it, no traceback, Slack gets its ack."""
    engine = create_engine(sqlite_url)
    app = build_app(slack_config(fake_slack), fake_assistant, engine, socket_mode=True)
    handler = ScreenedSocketModeHandler(app, APP_TOKEN)
    client = RecordingSocketClient()
    try:
        event = mention(ALICE.user_id, "hi", ts="1700000400.0002")
        event["user"] = {"id": ["U0ALICE"]}  # not an id: no listener may read this
        envelope = SlackSender("unused").envelope(event, "EvSOCKBAD")
        request = SocketModeRequest("events_api", "env-bad-1", envelope)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            await handler.handle(client, request)  # type: ignore[arg-type]
            await fake_slack.settle()
        assert [ack.envelope_id for ack in client.acks] == ["env-bad-1"]
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "malformed" in warnings[0].getMessage()
        assert not any(r.exc_info for r in caplog.records)
        assert fake_assistant.messages == []
        assert not fake_slack.calls_to("chat.postMessage")
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
        await engine.dispose()
