"""The broker as its own HTTP service, behind the same protocol (``RemoteBroker``)."""

from __future__ import annotations

import asyncio

import httpx
import jwt
import pytest

from broker import (
    AccessRevokedError,
    BrokerError,
    ChatUser,
    ExchangeFailedError,
    Identity,
    IdentityService,
    InvalidStateError,
    LinkCompleter,
    LocalIdentityService,
    NotLinkedError,
    RemoteBroker,
    TokenVerificationError,
)
from broker.sso import SsoLinker, SsoPolicy
from infra.tls import shared_ssl_context
from testing.identity import BrokerHarness, serve_broker_service, sign_in_at_login_page


async def test_remote_get_token_single_flight_and_invalidate(
    identity_broker: BrokerHarness,
) -> None:
    alice = await identity_broker.link("alice")
    stats = identity_broker.idp.provider.stats
    async with serve_broker_service(identity_broker) as remote:
        tokens = await asyncio.gather(*(remote.get_token(alice, "docs") for _ in range(100)))
        assert len({t.value for t in tokens}) == 1
        assert stats.exchanges == 1
        claims = jwt.decode(tokens[0].value, options={"verify_signature": False})
        assert claims["sub"] == "alice"
        assert claims["aud"] == tokens[0].audience == identity_broker.idp.audience("docs")
        assert tokens[0].scopes == {"docs:read"}
        assert tokens[0].expires_at.timestamp() == claims["exp"]
        await remote.invalidate(alice, "docs")
        await remote.get_token(alice, "docs")
        assert stats.exchanges == 2
        assert tokens[0].value not in repr(tokens[0])


async def test_remote_errors_keep_their_class(identity_broker: BrokerHarness) -> None:
    erin = await identity_broker.link("erin")
    async with serve_broker_service(identity_broker) as remote:
        with pytest.raises(NotLinkedError):
            await remote.get_token(Identity("zed", ChatUser("slack", "T", "U-zed")), "docs")
        with pytest.raises(ExchangeFailedError) as failed:
            await remote.get_token(erin, "database")
        assert failed.value.server == "database"
        await identity_broker.idp.revoke("erin")
        await remote.invalidate(erin, "docs")
        with pytest.raises(AccessRevokedError):
            await remote.get_token(erin, "docs")


async def test_service_requires_its_secret(identity_broker: BrokerHarness) -> None:
    alice = await identity_broker.link("alice")
    async with (
        serve_broker_service(identity_broker) as remote,
        httpx.AsyncClient(verify=shared_ssl_context()) as http,
    ):
        impostor = RemoteBroker(remote.base_url, "wrong-secret", http)
        with pytest.raises(BrokerError, match="refused") as refused:
            await impostor.get_token(alice, "docs")
        assert not isinstance(refused.value, NotLinkedError)
        anonymous = await http.post(f"{remote.base_url}/v1/token", json={"subject": "alice"})
        assert anonymous.status_code == 401
        # Not a JSON object, however it fails (nested past Python's stack was a 500 with a
        # traceback; the others repeated the parser's words): one plain answer.
        for body in (b"not json", b"[" * 100_000, b"\xff\xfe\x00", b"[1]", b"9" * 5000):
            garbage = await http.post(
                f"{remote.base_url}/v1/token",
                content=body,
                headers={"Authorization": "Bearer opsbot-test-broker-secret"},
            )
            assert (garbage.status_code, garbage.json()) == (
                400,
                {"error": "bad_request", "message": "the body is not a JSON object"},
            ), body[:20]
        # Ids with a control character or a lone surrogate are refused before any lookup
        # (PostgreSQL's text cannot hold a NUL).
        secret = {"Authorization": "Bearer opsbot-test-broker-secret"}
        for path, body in (
            ("token", b'{"subject": "al\\u0000ice", "server": "docs"}'),
            ("token", b'{"subject": "alice", "server": "docs\\u001b"}'),
            ("resolve_subject", b'{"subject": "al\\ud800ice"}'),
            (
                "resolve",
                b'{"chat_user": {"platform": "slack", "team_id": "T", "user_id": "U\\u0000"}}',
            ),
        ):
            refused = await http.post(f"{remote.base_url}/v1/{path}", content=body, headers=secret)
            assert (refused.status_code, refused.json()["error"]) == (400, "bad_request"), body
    assert identity_broker.idp.provider.stats.exchanges == 0


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_identity_service_resolve_link_and_unlink(
    identity_broker: BrokerHarness, kind: str
) -> None:
    carol_chat = ChatUser("slack", "T1", "U-carol")
    local = LocalIdentityService(identity_broker.broker, identity_broker.linking)
    async with serve_broker_service(identity_broker) as remote:
        service: IdentityService = remote if kind == "remote" else local
        completer: LinkCompleter = remote if kind == "remote" else local
        assert await service.resolve(carol_chat) is None
        url = await service.link_url(carol_chat)
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            reply = await sign_in_at_login_page(http, url, "carol")
        linked = await completer.complete_link(reply["state"], reply["code"], iss=reply["iss"])
        assert (linked.subject, linked.chat_user) == ("carol", carol_chat)
        with pytest.raises(InvalidStateError):  # the state was single-use
            await completer.complete_link(reply["state"], reply["code"], iss=reply["iss"])
        carol = await service.resolve(carol_chat)
        assert carol is not None
        assert carol.subject == "carol"
        assert carol.email == "carol@example.com"
        assert carol.groups == {"team-platform", "ticket-leads", "sre"}
        assert (await service.resolve_subject("carol")).groups == carol.groups
        token = await service.get_token(carol, "database")
        assert token.scopes == {"db:read", "db:query"}
        assert await service.unlink(carol_chat) is True
        assert await service.resolve(carol_chat) is None
        with pytest.raises(NotLinkedError):
            await service.get_token(carol, "database")
        with pytest.raises(NotLinkedError):
            await service.resolve_subject("carol")


@pytest.mark.parametrize("kind", ["local", "remote"])
async def test_teams_sso_links_through_the_token_locally_and_over_the_service(
    identity_broker: BrokerHarness, kind: str
) -> None:
    """The Entra token a Teams client sends links the Teams user (the IdP's subject); a token
    for another audience is refused as ``TokenVerificationError`` on both sides of the wire."""
    resource, tenant = "api://botid-app", "tenant-1"
    provider = identity_broker.idp.provider
    provider.accept_subject_audience(identity_broker.idp.client_id, resource)
    provider.accept_subject_audience(identity_broker.idp.client_id, "app")
    policy = SsoPolicy(resource, frozenset({tenant}), app_id="app")
    sso = SsoLinker(identity_broker.linking, policy)
    teams_alice = ChatUser("teams", tenant, "oid-alice")
    local = LocalIdentityService(identity_broker.broker, identity_broker.linking, sso=sso)
    async with serve_broker_service(identity_broker, sso=sso) as remote:
        service = remote if kind == "remote" else local
        wrong = provider.mint_sso_token(
            "alice", "api://other", tenant_id=tenant, object_id="oid-alice"
        )
        with pytest.raises(TokenVerificationError):
            await service.complete_sso(teams_alice, wrong)
        assert await service.resolve(teams_alice) is None
        token = provider.mint_sso_token("alice", resource, tenant_id=tenant, object_id="oid-alice")
        linked = await service.complete_sso(teams_alice, token)
        assert (linked.subject, linked.chat_user, linked.email) == (
            "alice",
            teams_alice,
            "alice@example.com",
        )
        found = await service.resolve(teams_alice)
        assert found is not None
        assert found.subject == "alice"
        assert (await service.get_token(found, "docs")).scopes == {"docs:read"}
        # Entra's v2 form names the app's client id as the audience: accepted as well.
        bob_chat = ChatUser("teams", tenant, "oid-bob")
        v2 = provider.mint_sso_token("bob", "app", tenant_id=tenant, object_id="oid-bob")
        assert (await service.complete_sso(bob_chat, v2)).subject == "bob"
