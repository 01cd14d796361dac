"""One approval, shown on Slack and on Teams, decided once: ``opsbot serve`` as deployed (Slack
and Teams in one process, the real core with the offline demo model, the dev IdP, the
reference ticketing server, both fake platforms), with ``approvals.card_platforms`` =
slack + teams.

Alice asks on Slack for a write; the card appears in #ops-approvals and, mirrored, as a new
thread in the Teams approvals channel. Bob approves in Teams: the ticket changes once (the
ticketing server's change log), the Teams click is answered with the terminal card, the Slack
card shows the decision and alice is told in her Slack thread. Bob's second click, on Slack,
changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import pytest

from infra.settings import (
    ApprovalSettings,
    RunSettings,
)
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from testing.identity import sign_in_at_login_page
from testing.slack import (
    APPROVALS_CHANNEL_ID as SLACK_APPROVALS,
)
from testing.slack import (
    FakeSlack,
    SlackSender,
    block_action,
    card_decided,
    mention,
)
from testing.teams import (
    APP_ID,
    APPROVALS_CHANNEL_ID,
    FakeTeams,
    TeamsUser,
    new_user,
)
from tests.bot.test_slack_events import _texts
from tests.bot.test_slack_full_stack import _link_from_slack
from tests.bot.test_teams_full_stack import (
    ServeBoth,
    mcp_trusted_issuer,  # noqa: F401  (fixture)
    serve_both,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.timeout(180)

BOB = new_user("Bob")


@pytest.fixture
async def app_url(
    serve_both: ServeBoth,  # noqa: F811  (the fixture imported above)
    fake_teams: FakeTeams,
) -> AsyncIterator[str]:
    fake_teams.members[APPROVALS_CHANNEL_ID] = [BOB]
    async with serve_both(
        teams={
            "approvals_conversation_id": APPROVALS_CHANNEL_ID,
            "approvals_service_url": fake_teams.service_url,
        },
        approvals=ApprovalSettings(card_platforms=["slack", "teams"], notice_poll_seconds=0.2),
        # In-process runs: in one process the Slack and Teams job runners share run_jobs and
        # claim each other's jobs (a `teams` branch issue, reported to the lead).
        runs=RunSettings(durable=False),
    ) as url:
        yield url


async def link_from_teams(
    fake: FakeTeams, app_url: str, user: TeamsUser, username: str, session: aiohttp.ClientSession
) -> None:
    """A Teams message from an unlinked user → the sign-in card in their personal chat → the
    IdP's login page → /oauth/callback."""
    status, _ = await fake.post_activity(app_url, fake.personal(user, "hello"), session=session)
    assert status == 202
    personal = fake.personal_conversation_id(user)
    (card,) = await fake.wait_for("posted", where=lambda c: c.conversation_id == personal, wait=60)
    (login_url,) = [a["url"] for c in card.cards for a in c.get("actions", []) if a.get("url")]
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        reply = await sign_in_at_login_page(http, login_url, username)
        page = await http.get(f"{app_url}/oauth/callback", params=reply)
    assert page.status_code == 200, page.text


def teams_click(fake: FakeTeams, user: TeamsUser, card: Any, verb: str) -> dict[str, Any]:
    content = card.cards[0]
    root = card.conversation_id.partition(";messageid=")[2]
    return {
        "type": "invoke",
        "name": "adaptiveCard/action",
        "id": f"f:{root}:{verb}",
        "channelId": "msteams",
        "serviceUrl": fake.service_url,
        "from": {"id": user.mri, "name": user.name, "aadObjectId": user.aad_object_id},
        "recipient": {"id": f"28:{APP_ID}", "name": "opsbot"},
        "conversation": {
            "id": card.conversation_id,
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
                "data": dict(content["refresh"]["action"]["data"]),
            },
            "trigger": "manual",
        },
    }


async def test_approved_in_teams_shows_on_the_slack_card_and_a_slack_click_changes_nothing(
    app_url: str,
    fake_slack: FakeSlack,
    fake_teams: FakeTeams,
    reference_servers: ReferenceServers,
) -> None:
    async with aiohttp.ClientSession() as session:
        sender = SlackSender(app_url, session=session)
        await _link_from_slack(sender, app_url, "U0ALICE", "alice", fake_slack)
        await _link_from_slack(sender, app_url, "U0BOB", "bob", fake_slack)
        await link_from_teams(fake_teams, app_url, BOB, "bob", session)

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
        (teams_card,) = await fake_teams.wait_for(
            "create", where=lambda c: c.conversation_id.startswith(APPROVALS_CHANNEL_ID), wait=60
        )
        assert teams_card.cards[0]["refresh"]["userIds"] == [BOB.mri]
        assert "PAY-102" in teams_card.text
        await fake_teams.settle()  # its location is saved once Teams answered the post

        # Bob approves in Teams.
        status, body = await fake_teams.post_activity(
            app_url, teams_click(fake_teams, BOB, teams_card, "approve"), session=session
        )
        assert status == 200, body
        answer = json.loads(body)
        assert answer["statusCode"] == 200
        assert answer["type"] == "application/vnd.microsoft.card.adaptive"
        assert "Approved by bob" in json.dumps(answer["value"])
        root = teams_card.conversation_id.partition(";messageid=")[2]
        await fake_teams.wait_for("update", where=lambda c: c.activity_id == root, wait=30)

        # The Slack card shows the decision; alice is told in her Slack thread.
        await fake_slack.wait_for("chat.update", where=card_decided, wait=30)
        told = await fake_slack.wait_for(
            "chat.postMessage",
            where=lambda p: p["channel"] == "C0PAY" and "approved" in p["text"],
            wait=30,
        )
        assert told[0]["thread_ts"] == "7.2"
        (card_key,) = [k for k in fake_slack.messages if k[0] == SLACK_APPROVALS]
        slack_card = fake_slack.messages[card_key]
        assert "Approved" in _texts(slack_card["blocks"])
        assert all(b["type"] != "actions" for b in slack_card["blocks"])

        # A second click, on Slack, changes nothing.
        approval_id = teams_card.cards[0]["refresh"]["action"]["data"]["approval_id"]
        status, _ = await sender.post_interaction(
            block_action("U0BOB", "approval_approve", approval_id, message_ts=slack_card["ts"])
        )
        assert status == 200
        await fake_slack.wait_for(
            "chat.postEphemeral", where=lambda p: "already decided" in p["text"], wait=30
        )
        await fake_slack.settle()
        assert "Approved" in _texts(fake_slack.messages[card_key]["blocks"])
    closes = [c for c in await reference_servers.tickets.all_changes() if c.ticket_key == "PAY-102"]
    assert [(c.tool, c.subject) for c in closes] == [("close_ticket", "alice")]


async def test_stopped_in_teams_withdraws_the_card_on_slack_too(
    app_url: str,
    fake_slack: FakeSlack,
    fake_teams: FakeTeams,
    reference_servers: ReferenceServers,
) -> None:
    """Alice asks in Teams; the card is on both platforms. She writes "stop" in her Teams
    thread: the approval is withdrawn once, both cards say so, nothing is written."""
    alice = new_user("Alice")
    async with aiohttp.ClientSession() as session:
        await link_from_teams(fake_teams, app_url, alice, "alice", session)
        ask = fake_teams.mention(alice, "close ticket PAY-102 because merchants re-exported")
        status, _ = await fake_teams.post_activity(app_url, ask, session=session)
        assert status == 202
        (teams_card,) = await fake_teams.wait_for(
            "create", where=lambda c: c.conversation_id.startswith(APPROVALS_CHANNEL_ID), wait=60
        )
        await fake_slack.wait_for(
            "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
        )
        await fake_teams.settle()
        stop = fake_teams.mention(alice, "stop", thread_id=str(ask["id"]))
        status, _ = await fake_teams.post_activity(app_url, stop, session=session)
        assert status == 202

        root = teams_card.conversation_id.partition(";messageid=")[2]
        (withdrawn,) = await fake_teams.wait_for(
            "update", where=lambda c: c.activity_id == root and "Withdrawn" in c.text, wait=30
        )
        assert "alice" in withdrawn.text
        await fake_slack.wait_for(
            "chat.update", where=lambda p: "Withdrawn" in _texts(p.get("blocks") or []), wait=30
        )
        await fake_slack.settle()
        (card_key,) = [k for k in fake_slack.messages if k[0] == SLACK_APPROVALS]
        slack_card = fake_slack.messages[card_key]
        assert "Withdrawn" in _texts(slack_card["blocks"])
        assert all(b["type"] != "actions" for b in slack_card["blocks"])
    assert [
        c for c in await reference_servers.tickets.all_changes() if c.ticket_key == "PAY-102"
    ] == []
