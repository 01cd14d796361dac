"""Inbound authentication of POST /api/messages, over HTTP against the running Teams app:
every way a token can be wrong gets 401 and nothing runs (the assistant hears nothing, the
Connector is never called, no delivery is claimed)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jwt
import pytest
from sqlalchemy import select

from bot.teams.auth import AuthConfig, ConnectorAuth, Rejected
from bot.teams.core import ChatUser
from infra.storage.schema import processed_events
from testing.fake_assistant import FakeAssistant
from testing.teams import (
    APP_ID,
    ISSUER,
    OTHER_TENANT_ID,
    TENANT_ID,
    FakeTeams,
    TeamsUser,
    new_user,
)
from tests.fixtures.teams import RunTeams, TeamsEnv

ALICE = new_user("Alice")
ALICE_CHAT = ChatUser("teams", TENANT_ID, ALICE.aad_object_id)


@pytest.fixture
def assistant() -> FakeAssistant:
    fake = FakeAssistant()
    fake.link(ALICE_CHAT, "alice", {"team-payments"})
    return fake


@pytest.fixture
async def env(run_teams: RunTeams, assistant: FakeAssistant) -> AsyncIterator[TeamsEnv]:
    async with run_teams(assistant) as running:
        yield running


async def _nothing_ran(env: TeamsEnv, assistant: FakeAssistant) -> None:
    await env.bot.adapter.idle()
    assert assistant.messages == []
    assert [c for c in env.fake.calls] == []
    async with env.engine.connect() as conn:
        assert (await conn.execute(select(processed_events))).all() == []


def _forgeries(fake: FakeTeams) -> dict[str, dict[str, Any]]:
    now = time.time()
    return {
        "forged key": {"token": fake.token(key=fake.foreign_key())},
        "unknown kid": {"token": fake.token(key=fake.foreign_key(), kid="someone-elses")},
        "expired": {"token": fake.token(expires_in=-400)},
        "not yet valid": {"token": fake.token(not_before=now + 400)},
        "wrong audience": {"token": fake.token(audience="another-bot")},
        "audience list": {"token": fake.token(audience=[APP_ID, "another-bot"])},
        "wrong issuer": {"token": fake.token(issuer="https://sts.example.com")},
        "wrong serviceurl": {"token": fake.token(service_url="https://evil.example.com/")},
        "alg none": {"token": fake.token(algorithm="none")},
        "HS256": {"token": fake.token(algorithm="HS256", secret="shared" * 8)},
        "no header": {"authorization": ""},
        "not bearer": {"authorization": "Basic dXNlcjpwYXNz"},
        "garbage": {"authorization": "Bearer not.a.jwt"},
    }


FORGERIES = [
    "forged key",
    "unknown kid",
    "expired",
    "not yet valid",
    "wrong audience",
    "audience list",
    "wrong issuer",
    "wrong serviceurl",
    "alg none",
    "HS256",
    "no header",
    "not bearer",
    "garbage",
]


@pytest.mark.parametrize("forgery", FORGERIES)
async def test_bad_token_is_refused_and_nothing_runs(
    env: TeamsEnv, assistant: FakeAssistant, forgery: str, caplog: pytest.LogCaptureFixture
) -> None:
    kwargs = _forgeries(env.fake)[forgery]
    status, body = await env.post(env.fake.mention(ALICE, "show PAY-1"), **kwargs)
    assert status == 401
    assert body == "unauthenticated"  # says nothing about why
    await _nothing_ran(env, assistant)
    refusals = [r for r in caplog.records if "refused with 401" in r.getMessage()]
    assert len(refusals) == 1
    assert not any(r.exc_info for r in caplog.records)


async def test_leeway_is_at_most_five_minutes(env: TeamsEnv, assistant: FakeAssistant) -> None:
    # Expired 200 s ago: within Microsoft's 5 minutes of clock skew.
    status, _ = await env.post(env.fake.mention(ALICE, "hi"), token=env.fake.token(expires_in=-200))
    assert status == 202
    await env.fake.wait_for("posted")


async def test_serviceurl_must_match_the_activity(env: TeamsEnv, assistant: FakeAssistant) -> None:
    """A valid token for the real Connector does not let a caller point opsbot elsewhere."""
    activity = env.fake.mention(ALICE, "hi")
    activity["serviceUrl"] = "http://127.0.0.1:9/"
    status, _ = await env.post(activity)
    assert status == 401
    await _nothing_ran(env, assistant)


@pytest.mark.parametrize("where", ["channelData", "conversation", "both"])
async def test_other_tenant_is_refused(env: TeamsEnv, assistant: FakeAssistant, where: str) -> None:
    outsider = TeamsUser(ALICE.aad_object_id, "Mallory", OTHER_TENANT_ID)
    activity = env.fake.mention(outsider if where == "both" else ALICE, "show PAY-1")
    if where == "channelData":
        activity["channelData"]["tenant"]["id"] = OTHER_TENANT_ID
    elif where == "conversation":
        activity["conversation"]["tenantId"] = OTHER_TENANT_ID
    status, _ = await env.post(activity)
    assert status == 401
    await _nothing_ran(env, assistant)


async def test_allowed_tenant_is_served(run_teams: RunTeams, assistant: FakeAssistant) -> None:
    guest = new_user("Guest", OTHER_TENANT_ID)
    async with run_teams(assistant, allowed_tenant_ids=frozenset({OTHER_TENANT_ID})) as env:
        status, _ = await env.post(env.fake.personal(guest, "hi"))
        assert status == 202
        await env.fake.wait_for("posted")


async def test_malformed_body_is_400_and_oversized_413(
    env: TeamsEnv, assistant: FakeAssistant
) -> None:
    async with aiohttp.ClientSession() as session:
        # Without a token, a malformed body is still only "unauthenticated".
        async with session.post(f"{env.url}/api/messages", data=b"{not json") as response:
            assert response.status == 401
        async with session.post(
            f"{env.url}/api/messages",
            data=b"{not json",
            headers={"Authorization": f"Bearer {env.fake.token()}"},
        ) as response:
            assert response.status == 400
        async with session.post(
            f"{env.url}/api/messages",
            data=b"x" * (300 * 1024),
            headers={"Authorization": f"Bearer {env.fake.token()}"},
        ) as response:
            assert response.status == 413
    await _nothing_ran(env, assistant)


# -- the verifier on its own: keys, rotation, endorsements ------------------------------


async def _rotate(
    fake: FakeTeams, auth: ConnectorAuth, activity: dict[str, Any], clock: list[float]
) -> None:
    """The Connector signs with a new key (new kid) from now on, past the refetch limit: a
    token of the new key is accepted (the keys are fetched again)."""
    fake._key = fake.foreign_key()
    fake.kid = "rotated"
    clock[0] += 60
    assert await auth.verify(f"Bearer {fake.token()}", activity)


async def test_rotated_key_is_fetched_once(fake_teams: FakeTeams) -> None:
    clock = [1000.0]
    async with aiohttp.ClientSession() as session:
        auth = ConnectorAuth(
            AuthConfig(
                APP_ID, fake_teams.openid_metadata_url, frozenset({ISSUER}), frozenset({TENANT_ID})
            ),
            session,
            monotonic=lambda: clock[0],
        )
        activity = fake_teams.personal(ALICE, "hi")
        assert (await auth.verify(f"Bearer {fake_teams.token()}", activity))["aud"] == APP_ID
        # Microsoft rotates its key: a token with the new kid makes opsbot fetch the keys again.
        await _rotate(fake_teams, auth, activity, clock)
        # A flood of unknown kids does not turn into a flood of fetches.
        with pytest.raises(Rejected, match="unknown key"):
            await auth.verify(f"Bearer {fake_teams.token(kid='nope')}", activity)


async def test_a_remembered_token_is_verified_once_and_checked_at_every_use(
    fake_teams: FakeTeams, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Connector's token is verified once (RS256 is most of an ack's CPU), but its
    lifetime and its key are checked each time: expired, or signed by a key that left the
    key set, it is refused like any other."""
    clock = [1000.0]
    decoded: list[str] = []
    decode = jwt.decode

    def counting(token: str, *args: Any, **kwargs: Any) -> Any:
        decoded.append(token)
        return decode(token, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting)
    async with aiohttp.ClientSession() as session:
        config = AuthConfig(
            APP_ID, fake_teams.openid_metadata_url, frozenset({ISSUER}), frozenset({TENANT_ID}), 0
        )
        auth = ConnectorAuth(config, session, monotonic=lambda: clock[0])
        activity = fake_teams.personal(ALICE, "hi")
        token = fake_teams.token()
        for _ in range(3):
            claims = await auth.verify(f"Bearer {token}", activity)
            assert claims["aud"] == APP_ID
            assert "_opsbot_key_endorsements" not in claims
        assert decoded == [token]

        short = fake_teams.token(expires_in=1.2)
        assert await auth.verify(f"Bearer {short}", activity)
        await asyncio.sleep(
            max(
                0.0,
                jwt.decode(short, options={"verify_signature": False})["exp"] - time.time() + 0.05,
            )
        )
        with pytest.raises(Rejected, match="Expired"):
            await auth.verify(f"Bearer {short}", activity)

        # The key rotates: a token of the new key refreshes the set, and the old key's token,
        # though remembered and unexpired, is now signed by an unknown key.
        await _rotate(fake_teams, auth, activity, clock)
        with pytest.raises(Rejected, match="unknown key"):
            await auth.verify(f"Bearer {token}", activity)


async def test_a_remembered_token_is_still_bound_to_each_activity(fake_teams: FakeTeams) -> None:
    """The token's verification is remembered, not its binding: the same token, once
    accepted, is refused for an activity of another serviceUrl or another tenant."""
    async with aiohttp.ClientSession() as session:
        config = AuthConfig(
            APP_ID, fake_teams.openid_metadata_url, frozenset({ISSUER}), frozenset({TENANT_ID})
        )
        auth = ConnectorAuth(config, session)
        token = f"Bearer {fake_teams.token()}"
        assert await auth.verify(token, fake_teams.personal(ALICE, "hi"))
        elsewhere = fake_teams.personal(ALICE, "hi")
        elsewhere["serviceUrl"] = "http://127.0.0.1:9/"
        with pytest.raises(Rejected, match="serviceurl"):
            await auth.verify(token, elsewhere)
        outsider = fake_teams.personal(ALICE, "hi")
        outsider["conversation"]["tenantId"] = OTHER_TENANT_ID
        outsider["channelData"]["tenant"]["id"] = OTHER_TENANT_ID
        with pytest.raises(Rejected, match="not served"):
            await auth.verify(token, outsider)
        assert await auth.verify(token, fake_teams.personal(ALICE, "again"))


async def test_key_not_endorsed_for_the_channel(fake_teams: FakeTeams) -> None:
    async with aiohttp.ClientSession() as session:
        auth = ConnectorAuth(
            AuthConfig(
                APP_ID, fake_teams.openid_metadata_url, frozenset({ISSUER}), frozenset({TENANT_ID})
            ),
            session,
        )
        activity = fake_teams.personal(ALICE, "hi")
        activity["channelId"] = "webchat"
        with pytest.raises(Rejected, match="endorsed"):
            await auth.verify(f"Bearer {fake_teams.token()}", activity)


def test_leeway_above_five_minutes_is_refused() -> None:
    with pytest.raises(ValueError, match="leeway"):
        AuthConfig(APP_ID, "https://x", frozenset({ISSUER}), frozenset({TENANT_ID}), 301)
