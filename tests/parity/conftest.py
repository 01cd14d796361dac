"""The parity suite's fixtures: ``driver`` is each chat adapter in turn (Slack, then Teams),
running over real HTTP against its fake platform, with one ``FakeAssistant`` behind both in
which alice and bob are one identity each across the platforms (erin is never linked)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.slack import SlackBotConfig, open_bot, serve_http
from infra.serving import bind_socket
from infra.storage import create_engine
from testing.fake_assistant import FakeAssistant
from testing.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, SlackSender
from testing.teams import APPROVALS_CHANNEL_ID, FakeTeams, new_user
from tests.fixtures.teams import RunTeams
from tests.parity.drivers import PEOPLE, Driver, SlackDriver, TeamsDriver

TEAMS_PEOPLE = {name: new_user(name.title()) for name in PEOPLE}


@pytest.fixture
def assistant() -> FakeAssistant:
    return FakeAssistant()


def _link_everyone(assistant: FakeAssistant, driver: Driver) -> None:
    assistant.link(driver.chat_user("alice"), "alice", {"team-payments"})
    assistant.link(driver.chat_user("bob"), "bob", {"team-payments", "ticket-leads"})


@pytest.fixture(params=["slack", "teams"])
async def driver(
    request: pytest.FixtureRequest,
    assistant: FakeAssistant,
    sqlite_url: str,
    run_teams: RunTeams,
    fake_teams: FakeTeams,
    fake_slack: FakeSlack,
) -> AsyncIterator[Driver]:
    """Both fakes run for either platform (cheap); only the one under test is used."""
    if request.param == "teams":
        async with run_teams(assistant, approvals_conversation_id=APPROVALS_CHANNEL_ID) as env:
            fake_teams.members[APPROVALS_CHANNEL_ID] = list(TEAMS_PEOPLE.values())
            teams = TeamsDriver(fake_teams, env.url, TEAMS_PEOPLE)
            _link_everyone(assistant, teams)
            yield teams
            await env.bot.adapter.idle()
            await env.bot.adapter.approvals.idle()
        return
    engine = create_engine(sqlite_url)
    config = SlackBotConfig(
        bot_token=BOT_TOKEN,
        signing_secret=SIGNING_SECRET,
        api_url=fake_slack.url,
        approvals_channel="ops-approvals",
    )
    try:
        async with (
            open_bot(config, assistant, engine) as bot,
            serve_http(bot.app, bind_socket("127.0.0.1", 0)) as url,
            aiohttp.ClientSession() as session,
        ):
            slack = SlackDriver(fake_slack, SlackSender(url, session=session), url)
            _link_everyone(assistant, slack)
            yield slack
    finally:
        await engine.dispose()
