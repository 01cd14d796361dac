"""IdP compatibility settings (issue 19): login scopes and ``prompt``, claim names, RFC 9207
``iss``, exchanged tokens bounded by their subject token, audiences that are not URLs.

Against the dev IdP over HTTP; ``test_third_party_idp.py`` runs linking against an
independent certified provider.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from broker import (
    ChatUser,
    ExchangeFailedError,
    InProcessBroker,
    LocalIdentityService,
    MemoryLinkStore,
    ServerTarget,
    TokenCipher,
    open_identity_service,
    open_token_client,
)
from broker.claims import ClaimNames, read_profile
from broker.dev_idp import TokenRules
from broker.errors import LinkingError
from infra.clock import ManualClock
from infra.settings import IdpSettings, McpServerSettings, Settings
from infra.tls import shared_ssl_context
from testing.identity import open_broker, sign_in_at_login_page, start_dev_idp

CAROL = ChatUser("slack", "T1", "U-carol")


async def test_login_asks_for_the_configured_scopes_and_prompt(
    tmp_path: Path, engine: AsyncEngine
) -> None:
    async with start_dev_idp() as idp:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            data_dir=tmp_path,
            idp=IdpSettings(
                issuer=idp.issuer,
                client_id=idp.client_id,
                client_secret=idp.client_secret,  # type: ignore[arg-type]
                scopes=["openid", "email", "offline_access", "groups"],
                prompt="consent",
            ),
            mcp_servers=[],
        )
        async with open_identity_service(settings, engine) as service:
            assert isinstance(service, LocalIdentityService)
            query = parse_qs(urlsplit(await service.link_url(CAROL)).query)
    assert query["scope"] == ["openid email offline_access groups"]
    assert query["prompt"] == ["consent"]


async def test_no_prompt_unless_configured() -> None:
    async with start_dev_idp() as idp, open_broker(idp) as harness:
        query = parse_qs(urlsplit(await harness.linking.start(CAROL)).query)
    assert "prompt" not in query
    assert query["scope"] == ["openid profile email offline_access"]


def test_settings_refuse_a_login_without_openid_and_bad_claim_names() -> None:
    with pytest.raises(ValidationError, match="openid"):
        IdpSettings(scopes=["email", "offline_access"])
    with pytest.raises(ValidationError, match="not a claim name"):
        IdpSettings(groups_claim="realm_access..roles")
    assert IdpSettings(groups_claim="realm_access.roles").groups_claim == "realm_access.roles"


def test_claims_are_read_from_configured_and_nested_names() -> None:
    claims = {
        "sub": "u1",
        "upn": "carol@corp.example",
        "realm_access": {"roles": ["sre", "oncall"]},
        "given": "Carol",
    }
    names = ClaimNames(groups="realm_access.roles", email="upn", name="given")
    profile = read_profile(claims, names)
    assert profile.email == "carol@corp.example"
    assert profile.name == "Carol"
    assert profile.groups == frozenset({"sre", "oncall"})
    assert not profile.missing
    assert read_profile({"sub": "u1"}, names).missing


KEYCLOAK_LIKE = TokenRules(
    email_claim="upn", name_claim="profile.display", groups_claim="realm_access.roles"
)


@pytest.mark.parametrize("configured", [True, False], ids=["custom-names", "defaults"])
async def test_the_claim_name_settings_reach_linking_and_the_broker(
    configured: bool, tmp_path: Path, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service built from the environment as ``opsbot`` builds it, against an IdP that
    puts email, name and groups under other (and nested) names, in its ID token and at
    userinfo: with OPSBOT_IDP__*_CLAIM set, the link has them and so does every refresh (the
    broker's groups); with the defaults, none of them is found."""
    async with start_dev_idp(rules=KEYCLOAK_LIKE) as idp:
        monkeypatch.setenv("OPSBOT_IDP__ISSUER", idp.issuer)
        monkeypatch.setenv("OPSBOT_IDP__CLIENT_ID", idp.client_id)
        monkeypatch.setenv("OPSBOT_IDP__CLIENT_SECRET", idp.client_secret)
        if configured:
            monkeypatch.setenv("OPSBOT_IDP__EMAIL_CLAIM", "upn")
            monkeypatch.setenv("OPSBOT_IDP__NAME_CLAIM", "profile.display")
            monkeypatch.setenv("OPSBOT_IDP__GROUPS_CLAIM", "realm_access.roles")
        settings = Settings(_env_file=None, data_dir=tmp_path, mcp_servers=[])  # type: ignore[call-arg]
        async with open_identity_service(settings, engine) as service:
            assert isinstance(service, LocalIdentityService)
            async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
                reply = await sign_in_at_login_page(http, await service.link_url(CAROL), "carol")
            linked = await service.linking.complete(reply["state"], reply["code"], iss=reply["iss"])
            resolved = await service.resolve(CAROL, fresh=True)
    assert resolved is not None
    if configured:
        groups = frozenset({"team-platform", "ticket-leads", "sre"})
        assert (linked.link.email, linked.name, linked.groups) == (
            "carol@example.com",
            "Carol Chen",
            groups,
        )
        assert (resolved.email, resolved.groups) == ("carol@example.com", groups)
    else:
        assert (linked.link.email, linked.name, linked.groups) == ("", "carol", frozenset())
        assert (resolved.email, resolved.groups) == ("", frozenset())


async def test_a_response_from_another_issuer_is_refused() -> None:
    async with start_dev_idp() as idp, open_broker(idp) as harness:
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            reply = await sign_in_at_login_page(http, await harness.linking.start(CAROL), "carol")
        assert reply["iss"] == idp.issuer  # the dev IdP sends RFC 9207 iss
        with pytest.raises(LinkingError, match="another identity provider"):
            await harness.linking.complete(
                reply["state"], reply["code"], iss="https://attacker.example"
            )
        assert await harness.links.get(CAROL) is None


async def test_a_response_without_iss_is_refused_when_the_provider_promises_one() -> None:
    async with start_dev_idp() as idp, open_broker(idp) as harness:
        assert (await harness.linking.client.provider.metadata()).iss_parameter_supported
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            reply = await sign_in_at_login_page(http, await harness.linking.start(CAROL), "carol")
        with pytest.raises(LinkingError, match="does not name its issuer"):
            await harness.linking.complete(reply["state"], reply["code"])
        assert await harness.links.get(CAROL) is None
        # With the iss the provider sent, the same flow links.
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            reply = await sign_in_at_login_page(http, await harness.linking.start(CAROL), "carol")
        result = await harness.linking.complete(reply["state"], reply["code"], iss=reply["iss"])
        assert result.link.subject == "carol"


async def test_an_exchanged_token_never_outlives_its_subject_token() -> None:
    clock = ManualClock()
    # This provider gives every exchanged token a fresh 10 minutes, whatever the subject's.
    async with (
        start_dev_idp(
            clock=clock,
            rules=TokenRules(
                access_token_ttl=timedelta(minutes=2),
                exchange_ttl=timedelta(minutes=10),
                clamp_exchange_exp=False,
            ),
        ) as idp,
        open_broker(idp, clock=clock, cache_margin=timedelta(seconds=0)) as harness,
    ):
        carol = await harness.link("carol")
        token = await harness.broker.get_token(carol, "ticketing")
        subject_expiry = clock() + timedelta(minutes=2)
        assert token.expires_at <= subject_expiry
        # Past the subject's expiry the broker refreshes and exchanges again.
        exchanges = idp.provider.stats.exchanges
        clock.advance(timedelta(minutes=2, seconds=1).total_seconds())
        again = await harness.broker.get_token(carol, "ticketing")
        assert idp.provider.stats.exchanges == exchanges + 1
        assert again.value != token.value


@pytest.mark.parametrize("audience", ["api://opsbot-ticketing", "opsbot-ticketing"])
async def test_audiences_need_not_be_urls(audience: str) -> None:
    async with start_dev_idp({"ticketing": audience}) as idp, open_broker(idp) as harness:
        token = await harness.token("carol", "ticketing")
        claims = await harness.broker._client.provider.verify(token, audience=audience)
    assert claims["aud"] == audience
    assert McpServerSettings(name="t", url="http://h/mcp", audience=audience).audience == audience


async def test_an_exchanged_token_without_act_is_taken_when_its_client_id_is_ours() -> None:
    """RFC 8693 makes ``act`` optional (idpyoidc issues none): ``client_id`` names opsbot."""
    async with (
        start_dev_idp(rules=TokenRules(actor_claim=False)) as idp,
        open_broker(idp) as harness,
    ):
        token = await harness.token("carol", "ticketing")
    claims = jwt.decode(token, options={"verify_signature": False})
    assert "act" not in claims
    assert claims["client_id"] == "opsbot"


@pytest.mark.parametrize(
    ("claims", "taken"),
    [
        ({"act": {"sub": "opsbot"}, "client_id": "opsbot"}, True),
        ({"client_id": "opsbot"}, True),
        ({"azp": "opsbot"}, True),
        ({"act": {"sub": "another-client"}, "client_id": "opsbot"}, False),
        ({"act": "opsbot", "client_id": "opsbot"}, False),
        ({"client_id": "another-client"}, False),
        ({}, False),
    ],
)
async def test_an_exchanged_token_must_name_opsbot_as_its_actor_or_client(
    claims: dict[str, object], taken: bool
) -> None:
    async with open_token_client(
        issuer="http://127.0.0.1:9", client_id="opsbot", client_secret="s"
    ) as client:
        links = MemoryLinkStore(TokenCipher(TokenCipher.generate_key()))
        broker = InProcessBroker(links=links, client=client, servers=[])
        target = ServerTarget("ticketing", "api://tickets")
        if taken:
            broker._check_issued_to_us(claims, target)
        else:
            with pytest.raises(ExchangeFailedError, match="ticketing"):
                broker._check_issued_to_us(claims, target)


async def test_a_subject_token_refused_with_invalid_request_is_refreshed_once() -> None:
    """RFC 8693 §2.2.2 refuses an invalid (expired, revoked) subject token with
    invalid_request, not invalid_grant: the broker refreshes the sign-in and asks again."""
    idp_clock = ManualClock()
    async with (
        start_dev_idp(
            clock=idp_clock,
            rules=TokenRules(
                access_token_ttl=timedelta(minutes=2), subject_token_error="invalid_request"
            ),
        ) as idp,
        # opsbot's clock lags the IdP's: it still takes carol's subject token for valid.
        open_broker(
            idp,
            clock=ManualClock(idp_clock.now),
            cache_margin=timedelta(0),
            groups_max_age=timedelta(hours=1),
        ) as harness,
    ):
        carol = await harness.link("carol")
        first = await harness.broker.get_token(carol, "ticketing")
        refreshes = idp.provider.stats.refreshes
        idp_clock.advance(timedelta(minutes=3).total_seconds())
        await harness.broker.invalidate(carol, "ticketing")
        again = await harness.broker.get_token(carol, "ticketing")
        assert idp.provider.stats.refused["invalid_request"] == 1
        assert idp.provider.stats.refreshes == refreshes + 1
        assert again.value != first.value
