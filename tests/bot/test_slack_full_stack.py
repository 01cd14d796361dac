"""``opsbot slack`` as deployed, built only from Settings (``open_assistant``: SQL link store,
in-process broker, the offline demo model, approvals), against the dev IdP, the reference MCP
servers and the fake Slack: link an account from Slack, ask, and approve a write."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from testing.identity import RunningIdp, sign_in_at_login_page
from testing.slack import (
    APPROVALS_CHANNEL_ID,
    FakeSlack,
    SlackSender,
    block_action,
    card_decided,
    mention,
)
from tests.bot.test_slack_events import _texts
from tests.fixtures.full_stack import (
    full_stack_settings,
    reference_mcp,
    serving_slack,
)


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, dev_idp.jwks_url


@pytest.fixture
async def app_url(
    fake_slack: FakeSlack,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    sqlite_url: str,
    tmp_path: Path,
) -> AsyncIterator[str]:
    mcp = reference_mcp(dev_idp, reference_servers)
    settings = full_stack_settings(fake_slack, dev_idp, mcp, sqlite_url, tmp_path)
    async with serving_slack(settings) as url:
        yield url


async def _link_from_slack(
    sender: SlackSender, app: str, user: str, username: str, fake: FakeSlack
) -> None:
    """``/ops link`` → a click on the Connect button (Slack tells the app, with the prompt's
    ``response_url``, and opens its URL) → the IdP's login page → /oauth/callback. Then the
    prompt is replaced with "Connected as …" and the user's App Home republished."""
    status, body = await sender.post_command("link", user=user)
    assert status == 200
    login_url = json.loads(body)["blocks"][1]["elements"][0]["url"]
    prompt_url = fake.response_url
    click = block_action(user, "connect_account", "", channel="C0GENERAL")
    await sender.post_interaction({**click, "response_url": prompt_url})
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        reply = await sign_in_at_login_page(http, login_url, username)
        page = await http.get(f"{app}/oauth/callback", params=reply)
    assert page.status_code == 200, page.text
    assert "Connected as" in page.text
    replaced = await fake.wait_for(
        "response_url", where=lambda p: "Connected as" in str(p.get("text")), wait=30
    )
    assert replaced[-1]["replace_original"] is True
    homes = await fake.wait_for("views.publish", where=lambda p: p["user_id"] == user, wait=30)
    assert "Connected as" in _texts(homes[-1]["view"]["blocks"])


async def test_link_ask_and_approve_through_the_configured_app(
    app_url: str, fake_slack: FakeSlack, reference_servers: ReferenceServers
) -> None:
    async with aiohttp.ClientSession() as session:
        sender = SlackSender(app_url, session=session)
        status, body = await sender.post_command("status", user="U0ALICE")
        assert status == 200
        assert "not connected" in body
        await _link_from_slack(sender, app_url, "U0ALICE", "alice", fake_slack)
        await _link_from_slack(sender, app_url, "U0BOB", "bob", fake_slack)
        status, body = await sender.post_command("status", user="U0ALICE")
        assert status == 200
        assert "Connected as *alice" in body

        await sender.post_event(mention("U0ALICE", "show ticket PAY-101", ts="7.1"))
        answer = (await fake_slack.wait_for("chat.update", wait=60))[0]
        assert "PAY-101" in _texts(answer["blocks"])

        await sender.post_event(
            mention(
                "U0ALICE",
                "close ticket PAY-102 because merchants re-exported",
                channel="C0PAY",
                ts="7.2",
            )
        )
        await fake_slack.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
        )
        await fake_slack.settle()
        # App Home was republished for the requester and for bob, a linked eligible approver.
        bob_homes = [p for p in fake_slack.calls_to("views.publish") if p["user_id"] == "U0BOB"]
        assert "Waiting for your decision" in _texts(bob_homes[-1]["view"]["blocks"])
        assert "key=PAY-102" in _texts(bob_homes[-1]["view"]["blocks"])
        (card_key,) = [k for k in fake_slack.messages if k[0] == APPROVALS_CHANNEL_ID]
        card = fake_slack.messages[card_key]
        approval_id = card["blocks"][-1]["elements"][0]["value"]
        await sender.post_interaction(
            block_action("U0BOB", "approval_approve", approval_id, message_ts=card["ts"])
        )
        await fake_slack.wait_for("chat.update", where=card_decided, wait=60)
        told = await fake_slack.wait_for(
            "chat.postMessage",
            where=lambda p: p["channel"] == "C0PAY" and "approved" in p["text"],
            wait=60,
        )
    closes = [c for c in await reference_servers.tickets.all_changes() if c.ticket_key == "PAY-102"]
    assert [(c.tool, c.subject) for c in closes] == [("close_ticket", "alice")]
    assert told[0]["thread_ts"] == "7.2"


async def test_ops_status_after_the_idp_revoked_access_is_a_clear_private_message(
    app_url: str, fake_slack: FakeSlack, dev_idp: RunningIdp
) -> None:
    async with aiohttp.ClientSession() as session:
        sender = SlackSender(app_url, session=session)
        await _link_from_slack(sender, app_url, "U0ALICE", "alice", fake_slack)
        await dev_idp.revoke("alice")
        for text in ("status", "whoami", "pending"):
            status, body = await sender.post_command(text, user="U0ALICE")
            assert status == 200, body
            ack = json.loads(body)
            assert ack["response_type"] == "ephemeral"
            assert "no longer lets opsbot act for you" in ack["text"], ack
            assert "/ops link" in ack["text"]
        # App Home says the same instead of failing.
        home = {"type": "app_home_opened", "tab": "home", "user": "U0ALICE", "channel": "D0A"}
        published = len(fake_slack.calls_to("views.publish"))  # linking published one already
        status, _ = await sender.post_event(home)
        assert status == 200
        view = (await fake_slack.wait_for("views.publish", published + 1))[-1]
        assert "no longer lets opsbot act for you" in _texts(view["view"]["blocks"])
        # The refused refresh marked the link broken: App Home asks to reconnect.
        assert "reconnect" in _texts(view["view"]["blocks"])
