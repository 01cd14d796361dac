"""A running Slack app (HTTP mode on port 0) wired to the fake Slack Web API and an assistant."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import aiohttp
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.slack import SlackBotConfig, open_bot, serve_http
from bot.slack.core import AssistantPort, ChatUser
from bot.slack.durable import DurableSlackAdapter, open_durable_bot
from bot.slack.front import AckFront
from infra.serving import bind_socket
from infra.storage import create_engine
from testing.fake_assistant import FakeAssistant
from testing.slack import (
    BOT_TOKEN,
    SIGNING_SECRET,
    TEAM_ID,
    FakeSlack,
    SlackSender,
)

ALICE = ChatUser("slack", TEAM_ID, "U0ALICE")
BOB = ChatUser("slack", TEAM_ID, "U0BOB")  # ticket-leads: an approver
DAVE = ChatUser("slack", TEAM_ID, "U0DAVE")  # no approver group
ERIN = ChatUser("slack", TEAM_ID, "U0ERIN")  # not linked


def slack_config(fake: FakeSlack, **overrides: object) -> SlackBotConfig:
    values: dict[str, object] = {
        "bot_token": BOT_TOKEN,
        "signing_secret": SIGNING_SECRET,
        "api_url": fake.url,
        "approvals_channel": "ops-approvals",
    }
    values.update(overrides)
    return SlackBotConfig(**values)  # type: ignore[arg-type]


@dataclass
class SlackEnv:
    fake: FakeSlack
    sender: SlackSender
    url: str
    engine: AsyncEngine
    durable: bool


RunApp = Callable[..., AbstractAsyncContextManager[SlackEnv]]


@pytest.fixture
def fake_assistant() -> FakeAssistant:
    assistant = FakeAssistant()
    assistant.link(ALICE, "alice", {"team-payments"})
    assistant.link(BOB, "bob", {"team-payments", "ticket-leads"})
    assistant.link(DAVE, "dave", {"team-platform"})
    return assistant


@pytest.fixture(params=["in_process", "durable"])
def run_app(request: pytest.FixtureRequest, fake_slack: FakeSlack, sqlite_url: str) -> RunApp:
    """``async with run_app(assistant) as env``: the app serving HTTP on a fresh port, with
    messages answered in process or as durable jobs (every test here runs both ways). Durable
    runs are served as in production: acked on the front's own thread, loop and pool
    (``bot.slack.front``)."""
    durable = request.param == "durable"

    @asynccontextmanager
    async def run(
        assistant: AssistantPort, database_url: str | None = None, **config: object
    ) -> AsyncIterator[SlackEnv]:
        engine = create_engine(database_url or sqlite_url)
        bot_config = slack_config(fake_slack, **config)
        opened = (
            open_durable_bot(bot_config, assistant, engine)
            if durable
            else open_bot(bot_config, assistant, engine)
        )
        try:
            async with (
                opened as bot,
                serve_http(
                    bot.app,
                    bind_socket("127.0.0.1", 0),
                    front=_front(bot.adapter, database_url or sqlite_url),
                ) as url,
                aiohttp.ClientSession() as session,
            ):
                sender = SlackSender(url, session=session)
                yield SlackEnv(fake_slack, sender, url, engine, durable)
        finally:
            await engine.dispose()

    return run


def _front(adapter: object, database_url: str) -> AckFront | None:
    return AckFront(adapter, database_url) if isinstance(adapter, DurableSlackAdapter) else None


@pytest.fixture
async def env(run_app: RunApp, fake_assistant: FakeAssistant) -> AsyncIterator[SlackEnv]:
    async with run_app(fake_assistant) as running:
        yield running


class ProblemLog(logging.Handler):
    """Log records that carry a traceback, or are errors: a fuzz must cause none."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)
