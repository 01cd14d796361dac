"""Teams SSO over HTTP against ``opsbot serve`` built from Settings (Slack and Teams in one
process, the real broker, the dev IdP playing the company's Entra ID).

An unlinked Teams user gets an OAuthCard whose ``tokenExchangeResource`` is the bot's
``api://botid-<app id>``; the Teams client's silent token comes back in a
``signin/tokenExchange`` invoke. A good token links the person to the same identity as their
Slack link (one subject) and the question that brought the card is answered; a forged,
expired, wrong-audience, wrong-tenant, other person's or scope-less token gets 412 and links
nobody; the same exchange twice gets 409 and links once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import aiohttp
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from testing.identity import RunningIdp
from testing.slack import FakeSlack, SlackSender
from testing.teams import APP_ID, OTHER_TENANT_ID, TENANT_ID, ConnectorCall, FakeTeams, new_user
from tests.bot.test_slack_full_stack import _link_from_slack
from tests.bot.test_teams_full_stack import (
    ServeBoth,
    account_links_in,
    mcp_trusted_issuer,  # noqa: F401  (fixture)
    serve_both,  # noqa: F401  (fixture)
)

pytestmark = pytest.mark.timeout(120)

ALICE = new_user("Alice")
BOB = new_user("Bob")
RESOURCE = f"api://botid-{APP_ID}"
CONNECTION = "opsbot-sso"


@pytest.fixture
async def app_url(
    serve_both: ServeBoth,  # noqa: F811  (the fixture imported above)
    dev_idp: RunningIdp,
) -> AsyncIterator[str]:
    # Entra plays the company IdP: opsbot's client may exchange tokens minted for its API.
    dev_idp.provider.accept_subject_audience(dev_idp.client_id, RESOURCE)
    async with serve_both(teams={"sso_connection_name": CONNECTION}) as url:
        yield url


async def oauth_card_for(app_url: str, fake: FakeTeams, text: str) -> tuple[dict[str, str], str]:
    """Alice (unlinked in Teams) asks in a channel: the OAuthCard she gets privately, and the
    conversation she asked in."""
    ask = fake.mention(ALICE, text)
    status, _ = await fake.post_activity(app_url, ask)
    assert status == 202
    personal = fake.personal_conversation_id(ALICE)
    seen = len([c for c in fake.posted() if c.conversation_id == personal])
    calls = await fake.wait_for(
        "posted", seen + 1, where=lambda c: c.conversation_id == personal and bool(c.oauth_cards)
    )
    return calls[-1].oauth_cards[0], str(ask["conversation"]["id"])


def sso_token(idp: RunningIdp, subject: str = "alice", **claims: object) -> str:
    options: dict[str, object] = {"tenant_id": TENANT_ID, "object_id": ALICE.aad_object_id}
    options.update(claims)
    audience = str(options.pop("audience", RESOURCE))
    return idp.provider.mint_sso_token(subject, audience, **options)  # type: ignore[arg-type]


def is_answer_in(conversation: str) -> Callable[[ConnectorCall], bool]:
    """An answer card in ``conversation`` (not the "sign-in link sent privately" note)."""
    return lambda c: (
        c.conversation_id == conversation and bool(c.cards) and "sign-in link" not in c.text
    )


def answers_in(fake: FakeTeams, conversation: str) -> list[ConnectorCall]:
    return [c for c in fake.posted() if is_answer_in(conversation)(c)]


async def test_sso_links_the_teams_user_to_their_slack_identity_and_answers_the_question(
    app_url: str, fake_slack: FakeSlack, fake_teams: FakeTeams, dev_idp: RunningIdp, sqlite_url: str
) -> None:
    async with aiohttp.ClientSession() as session:
        await _link_from_slack(
            SlackSender(app_url, session=session), app_url, "U0A", "alice", fake_slack
        )
    card, conversation = await oauth_card_for(app_url, fake_teams, "show ticket PAY-101")
    assert card["connectionName"] == CONNECTION
    assert card["tokenExchangeResource"]["uri"] == RESOURCE
    # The fallback button is the same IdP login as the plain sign-in card.
    (button,) = card["buttons"]
    assert button["type"] == "signin"
    assert button["value"].startswith(f"{dev_idp.issuer}/authorize?")
    assert answers_in(fake_teams, conversation) == []

    exchange = fake_teams.token_exchange(ALICE, card, sso_token(dev_idp))
    status, body = await fake_teams.post_activity(app_url, exchange)
    assert status == 200, body
    assert json.loads(body) == {
        "id": card["tokenExchangeResource"]["id"],
        "connectionName": CONNECTION,
    }
    # The question that brought the card is answered, as alice, in its own thread.
    (answer,) = await fake_teams.wait_for("posted", where=is_answer_in(conversation), wait=60)
    assert "PAY-101" in answer.text
    # One identity: the Teams link names the same subject as the Slack link.
    assert sorted(await account_links_in(sqlite_url)) == [("slack", "alice"), ("teams", "alice")]
    assert dev_idp.provider.stats.sign_ins_by_exchange == 1

    # The same exchange again (a retry, another instance): 409, linked once, answered once.
    status, body = await fake_teams.post_activity(app_url, exchange)
    assert status == 409
    assert "already processed" in json.loads(body)["failureDetail"]
    await fake_teams.settle()
    assert len(answers_in(fake_teams, conversation)) == 1
    assert dev_idp.provider.stats.sign_ins_by_exchange == 1
    assert sorted(await account_links_in(sqlite_url)) == [("slack", "alice"), ("teams", "alice")]

    # Linked: the next question is answered at once, no card.
    ask = fake_teams.mention(ALICE, "show ticket PAY-101")
    status, _ = await fake_teams.post_activity(app_url, ask)
    assert status == 202
    await fake_teams.wait_for("posted", where=is_answer_in(str(ask["conversation"]["id"])), wait=60)


def _forged(idp: RunningIdp) -> str:
    """A well-formed SSO token with the IdP's kid, signed by a key the IdP never published."""
    good = sso_token(idp)
    claims = jwt.decode(good, options={"verify_signature": False})
    kid = jwt.get_unverified_header(good)["kid"]
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


async def test_bad_sso_tokens_get_412_and_link_nobody(
    app_url: str, fake_teams: FakeTeams, dev_idp: RunningIdp, sqlite_url: str
) -> None:
    long_ago = datetime.now(UTC) - timedelta(hours=3)
    bad = {
        "forged signature": _forged(dev_idp),
        "wrong audience": sso_token(dev_idp, audience="api://botid-someone-else"),
        "another client's token": sso_token(dev_idp, audience=dev_idp.client_id),
        "wrong tenant": sso_token(dev_idp, tenant_id=OTHER_TENANT_ID),
        "another person's token": sso_token(dev_idp, "bob", object_id=BOB.aad_object_id),
        "expired": sso_token(dev_idp, issued_at=long_ago),
        "no access_as_user scope": sso_token(dev_idp, scope="User.Read"),
        "not a JWT": "not-a-token",
    }
    card, conversation = await oauth_card_for(app_url, fake_teams, "show ticket PAY-101")
    for n, (why, token) in enumerate(bad.items()):
        exchange = fake_teams.token_exchange(ALICE, card, token, exchange_id=f"bad-{n}")
        status, body = await fake_teams.post_activity(app_url, exchange)
        assert status == 412, f"{why}: {status} {body}"
        failure = json.loads(body)
        assert failure["id"] == f"bad-{n}"
        assert "sign in with the link" in failure["failureDetail"], why
        assert "eyJ" not in body  # the token is never echoed
    # A good token the IdP refuses to exchange (her access was revoked meanwhile): 412 too.
    dev_idp.provider.revoke_user("alice")
    refused = fake_teams.token_exchange(ALICE, card, sso_token(dev_idp), exchange_id="revoked")
    status, body = await fake_teams.post_activity(app_url, refused)
    assert status == 412, body
    assert dev_idp.provider.stats.refused["invalid_grant"] == 1
    dev_idp.provider.restore_user("alice")
    await fake_teams.settle()
    assert await account_links_in(sqlite_url) == []
    assert dev_idp.provider.stats.sign_ins_by_exchange == 0
    assert answers_in(fake_teams, conversation) == []

    # The card itself still works: its good token links her and answers the question.
    good = fake_teams.token_exchange(ALICE, card, sso_token(dev_idp))
    status, _ = await fake_teams.post_activity(app_url, good)
    assert status == 200
    await fake_teams.wait_for("posted", where=is_answer_in(conversation), wait=60)
    assert await account_links_in(sqlite_url) == [("teams", "alice")]


async def test_an_exchange_for_a_card_not_known_here_links_and_says_so_privately(
    app_url: str, fake_teams: FakeTeams, dev_idp: RunningIdp, sqlite_url: str
) -> None:
    """The card came from another instance (or this one restarted): she is linked and told
    privately to ask again; the question is not answered here."""
    card, conversation = await oauth_card_for(app_url, fake_teams, "show ticket PAY-101")
    exchange = fake_teams.token_exchange(ALICE, card, sso_token(dev_idp), exchange_id="elsewhere")
    status, _ = await fake_teams.post_activity(app_url, exchange)
    assert status == 200
    personal = fake_teams.personal_conversation_id(ALICE)
    await fake_teams.wait_for(
        "posted", where=lambda c: c.conversation_id == personal and "Connected as" in c.text
    )
    await fake_teams.settle()
    assert answers_in(fake_teams, conversation) == []
    assert await account_links_in(sqlite_url) == [("teams", "alice")]


async def test_an_exchange_without_a_token_is_a_clear_400(
    app_url: str, fake_teams: FakeTeams, dev_idp: RunningIdp, sqlite_url: str
) -> None:
    card, _ = await oauth_card_for(app_url, fake_teams, "show ticket PAY-101")
    exchange = fake_teams.token_exchange(ALICE, card, "")
    status, body = await fake_teams.post_activity(app_url, exchange)
    assert status == 400
    assert "no token" in json.loads(body)["failureDetail"]
    assert await account_links_in(sqlite_url) == []


async def test_without_sso_the_sign_in_card_is_the_plain_one_and_an_exchange_links_nobody(
    serve_both: ServeBoth,  # noqa: F811  (the fixture imported above)
    fake_teams: FakeTeams,
    dev_idp: RunningIdp,
    sqlite_url: str,
) -> None:
    dev_idp.provider.accept_subject_audience(dev_idp.client_id, RESOURCE)
    async with serve_both() as url:
        ask = fake_teams.mention(ALICE, "show ticket PAY-101")
        assert (await fake_teams.post_activity(url, ask))[0] == 202
        personal = fake_teams.personal_conversation_id(ALICE)
        (card,) = await fake_teams.wait_for("posted", where=lambda c: c.conversation_id == personal)
        assert card.oauth_cards == []
        assert "Action.OpenUrl" in card.text
        fake_card = {
            "connectionName": CONNECTION,
            "tokenExchangeResource": {"id": "x1", "uri": RESOURCE},
        }
        exchange = fake_teams.token_exchange(ALICE, fake_card, sso_token(dev_idp))
        status, body = await fake_teams.post_activity(url, exchange)
        assert status == 412, (status, body)
        assert "not enabled" in json.loads(body)["failureDetail"]
    assert await account_links_in(sqlite_url) == []
