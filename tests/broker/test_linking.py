"""Account linking end to end: chat → IdP login page → /oauth/callback over HTTP → stored link."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from sqlalchemy import select
from starlette.applications import Starlette

from broker import ChatUser, Identity
from broker.errors import InvalidStateError
from broker.links import SqlLinkStore, TokenCipher
from broker.web import link_routes
from infra.clock import ManualClock
from infra.serving import bind_socket, serve_asgi, socket_url
from infra.storage import create_engine
from infra.storage.schema import account_links
from infra.tls import shared_ssl_context
from testing.identity import BrokerHarness, RunningIdp, open_broker, start_dev_idp

ALICE = ChatUser("slack", "T1", "U-alice")


@dataclass
class LinkingApp:
    harness: BrokerHarness
    callback_url: str
    clock: ManualClock
    database_url: str


@contextlib.asynccontextmanager
async def linking_app(
    idp: RunningIdp, database_url: str, clock: ManualClock
) -> AsyncIterator[LinkingApp]:
    sock = bind_socket("127.0.0.1", 0)
    callback_url = f"{socket_url(sock)}/oauth/callback"
    cipher = TokenCipher(TokenCipher.generate_key())
    engine = create_engine(database_url)
    try:
        async with open_broker(
            idp,
            links=SqlLinkStore(engine, cipher, clock),
            cipher=cipher,
            clock=clock,
            callback_url=callback_url,
        ) as harness:
            app = Starlette(routes=link_routes(harness.linking))
            async with serve_asgi(app, sock):
                yield LinkingApp(harness, callback_url, clock, database_url)
    finally:
        await engine.dispose()


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[LinkingApp]:
    clock = ManualClock()
    async with start_dev_idp(clock=clock) as idp, linking_app(idp, database_url, clock) as app:
        yield app


async def login_at_idp(http: httpx.AsyncClient, login_url: str, username: str) -> str:
    """Walk the IdP's login page; the callback URL the IdP redirects the browser to."""
    page = await http.get(login_url)
    assert page.status_code == 200
    assert f'value="{username}"' in page.text
    form = {k: v[0] for k, v in parse_qs(urlsplit(login_url).query).items()}
    issuer = login_url.split("/authorize")[0]
    reply = await http.post(f"{issuer}/authorize", data={**form, "username": username})
    assert reply.status_code == 303
    location: str = reply.headers["location"]
    return location


def with_param(url: str, name: str, value: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query[name] = value
    return parts._replace(query=urlencode(query)).geturl()


async def test_linking_end_to_end_through_the_login_page(app: LinkingApp) -> None:
    harness = app.harness
    login_url = await harness.linking.start(ALICE)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        callback = await login_at_idp(http, login_url, "alice")
        assert callback.startswith(app.callback_url)
        done = await http.get(callback)
    assert done.status_code == 200, done.text
    assert "alice@example.com" in done.text
    link = await harness.links.get(ALICE)
    assert link is not None
    assert (link.subject, link.email) == ("alice", "alice@example.com")
    token = await harness.broker.get_token(Identity("alice", ALICE), "ticketing")
    assert token.scopes == {"tickets:read", "tickets:write"}


async def test_stored_refresh_token_is_not_readable_in_the_database(app: LinkingApp) -> None:
    harness = app.harness
    login_url = await harness.linking.start(ALICE)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        assert (await http.get(await login_at_idp(http, login_url, "alice"))).status_code == 200
    refresh = await harness.links.refresh_token(ALICE)
    assert refresh
    engine = create_engine(app.database_url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(account_links))).mappings().all()
    finally:
        await engine.dispose()
    assert len(rows) == 1
    assert refresh not in repr(dict(rows[0]))
    assert rows[0]["refresh_token_encrypted"] != refresh


async def test_tampered_state_is_refused(app: LinkingApp) -> None:
    login_url = await app.harness.linking.start(ALICE)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        callback = await login_at_idp(http, login_url, "alice")
        state = parse_qs(urlsplit(callback).query)["state"][0]
        flipped = state[:20] + ("A" if state[20] != "A" else "B") + state[21:]
        refused = await http.get(with_param(callback, "state", flipped))
        forged = await http.get(with_param(callback, "state", "forged-state"))
    assert refused.status_code == 400
    assert forged.status_code == 400
    assert await app.harness.links.get(ALICE) is None


async def test_replayed_state_is_refused(app: LinkingApp) -> None:
    login_url = await app.harness.linking.start(ALICE)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        callback = await login_at_idp(http, login_url, "alice")
        first = await http.get(callback)
        again = await http.get(callback)
    assert first.status_code == 200
    assert again.status_code == 400
    assert "already used" in again.text
    state = parse_qs(urlsplit(callback).query)["state"][0]
    with pytest.raises(InvalidStateError):
        await app.harness.linking.complete(state, "any-code")


async def test_expired_state_is_refused(app: LinkingApp) -> None:
    login_url = await app.harness.linking.start(ALICE)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        callback = await login_at_idp(http, login_url, "alice")
        app.clock.advance(app.harness.linking.flow.ttl.total_seconds() + 1)
        late = await http.get(callback)
    assert late.status_code == 400
    assert "expired" in late.text
    assert await app.harness.links.get(ALICE) is None


async def test_state_is_bound_to_the_chat_user_who_asked(app: LinkingApp) -> None:
    login_url = await app.harness.linking.start(ALICE)
    state = parse_qs(urlsplit(login_url).query)["state"][0]
    with pytest.raises(InvalidStateError, match="another chat user"):
        await app.harness.linking.complete(
            state, "code", expected_chat_user=ChatUser("slack", "T1", "U-mallory")
        )
    # Whoever signs in at the IdP, the link is made for the chat user who started it.
    login_url = await app.harness.linking.start(ALICE)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        assert (await http.get(await login_at_idp(http, login_url, "bob"))).status_code == 200
    link = await app.harness.links.get(ALICE)
    assert link is not None
    assert link.subject == "bob"
    assert await app.harness.links.get(ChatUser("slack", "T1", "U-bob")) is None


async def test_unlink_deletes_link_and_refresh_token(app: LinkingApp) -> None:
    harness = app.harness
    identity = await harness.link("dave", ALICE)
    await harness.broker.get_token(identity, "docs")
    refresh = await harness.links.refresh_token(ALICE)
    assert refresh
    assert await harness.linking.unlink(ALICE) is True
    assert await harness.links.get(ALICE) is None
    assert await harness.links.refresh_token(ALICE) is None
    # The IdP forgot the refresh token too (RFC 7009 revocation).
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        response = await http.post(
            harness.idp.token_url,
            data={"grant_type": "refresh_token", "refresh_token": refresh},
            auth=(harness.idp.client_id, harness.idp.client_secret),
        )
    assert response.json()["error"] == "invalid_grant"
    await harness.broker.invalidate_user("dave")
    from broker import NotLinkedError

    with pytest.raises(NotLinkedError):
        await harness.broker.get_token(identity, "docs")


async def test_revoked_user_cannot_link(app: LinkingApp) -> None:
    await app.harness.idp.revoke("erin")
    login_url = await app.harness.linking.start(ALICE)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        callback = await login_at_idp(http, login_url, "erin")
        refused = await http.get(callback)
    assert "error=access_denied" in callback
    assert refused.status_code == 400
    assert await app.harness.links.get(ALICE) is None
