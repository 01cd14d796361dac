"""``opsbot serve`` as deployed, built only from Settings: Slack and Teams in one aiohttp
process (``/slack/events`` and ``/api/messages`` on one port), with the real core (SQL link
store, in-process broker, the offline demo model, durable runs), the dev IdP, the reference
MCP servers, the fake Slack and the fake Teams channel.

A person who uses both platforms links once per chat account through the same IdP login and
is then one identity: the same subject, the same rights, answers read as them."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from sqlalchemy import select

from infra.storage import create_engine
from infra.storage.schema import account_links
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from testing.identity import RunningIdp, sign_in_at_login_page
from testing.slack import FakeSlack, SlackSender, mention
from testing.teams import FakeTeams, new_user
from tests.bot.test_slack_full_stack import _link_from_slack
from tests.fixtures.full_stack import (
    full_stack_settings,
    reference_mcp,
    serving_slack,
    teams_settings,
)

ALICE = new_user("Alice")


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, dev_idp.jwks_url


@contextlib.asynccontextmanager
async def serving_both(
    fake_slack: FakeSlack,
    fake_teams: FakeTeams,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    sqlite_url: str,
    tmp_path: Path,
    *,
    teams: dict[str, Any] | None = None,
    **overrides: Any,
) -> AsyncIterator[str]:
    """``opsbot serve`` (Slack and Teams) built from Settings; ``teams``: further Teams
    settings (``sso_connection_name``...), ``overrides``: further Settings fields. Yields the
    app's URL."""
    mcp = reference_mcp(dev_idp, reference_servers)
    settings = full_stack_settings(
        fake_slack,
        dev_idp,
        mcp,
        sqlite_url,
        tmp_path,
        teams=teams_settings(fake_teams, **(teams or {})),
        **overrides,
    )
    async with serving_slack(settings, with_teams=True) as url:
        yield url


ServeBoth = Callable[..., contextlib.AbstractAsyncContextManager[str]]


@pytest.fixture
def serve_both(
    fake_slack: FakeSlack,
    fake_teams: FakeTeams,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    sqlite_url: str,
    tmp_path: Path,
) -> ServeBoth:
    """``async with serve_both(teams={...}, **settings) as url``: ``serving_both`` on this
    test's fakes, IdP, servers and database."""
    return functools.partial(
        serving_both, fake_slack, fake_teams, dev_idp, reference_servers, sqlite_url, tmp_path
    )


@pytest.fixture
async def app_url(serve_both: ServeBoth) -> AsyncIterator[str]:
    async with serve_both() as url:
        yield url


async def account_links_in(url: str) -> list[tuple[str, str]]:
    """Every account link as (platform, subject)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            links = (await conn.execute(select(account_links))).mappings().all()
    finally:
        await engine.dispose()
    return [(link["platform"], link["subject"]) for link in links]


async def test_one_person_links_on_both_platforms_and_asks_in_teams(
    app_url: str, fake_slack: FakeSlack, fake_teams: FakeTeams, sqlite_url: str
) -> None:
    async with aiohttp.ClientSession() as session:
        sender = SlackSender(app_url, session=session)
        await _link_from_slack(sender, app_url, "U0ALICE", "alice", fake_slack)

        # In Teams she is not linked yet: the sign-in card reaches her alone.
        status, _ = await fake_teams.post_activity(
            app_url, fake_teams.mention(ALICE, "show ticket PAY-101"), session=session
        )
        assert status == 202
        personal = fake_teams.personal_conversation_id(ALICE)
        (card,) = await fake_teams.wait_for(
            "posted", where=lambda c: c.conversation_id == personal, wait=60
        )
        (login_url,) = [a["url"] for c in card.cards for a in c.get("actions", []) if a.get("url")]
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            reply = await sign_in_at_login_page(http, login_url, "alice")
            page = await http.get(f"{app_url}/oauth/callback", params=reply)
        assert page.status_code == 200, page.text
        assert "Connected as" in page.text

        # Now she asks again, in a new thread, and is answered as herself with the source.
        ask = fake_teams.mention(ALICE, "show ticket PAY-101")
        status, _ = await fake_teams.post_activity(app_url, ask, session=session)
        assert status == 202
        conversation = ask["conversation"]["id"]
        (answer,) = await fake_teams.wait_for(
            "posted", where=lambda c: c.conversation_id == conversation and bool(c.cards), wait=60
        )
        assert "PAY-101" in answer.text

        # And Slack still works from the same process.
        status, _ = await sender.post_event(mention("U0ALICE", "show ticket PAY-101", ts="9.1"))
        assert status == 200
        await fake_slack.wait_for("chat.update", wait=60)

    links = await account_links_in(sqlite_url)
    assert set(links) == {("slack", links[0][1]), ("teams", links[0][1])}
