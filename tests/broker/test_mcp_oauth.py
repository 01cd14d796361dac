"""The ``oauth`` auth mode for MCP servers (the MCP authorization spec, issue 19) against
panva's certified ``oidc-provider`` with dynamic client registration (RFC 7591) and resource
indicators (RFC 8707): discovery from a server's RFC 9728 metadata, registration, and the
per-user flow (connect, token for exactly that server, refresh, revoke)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from sqlalchemy import select
from starlette.applications import Starlette

from broker import ChatUser, LocalIdentityService, NotLinkedError
from broker.links import TokenCipher
from broker.login_state import LoginFlow
from broker.mcp_oauth import OAuthDiscoveryError, discover, register
from broker.mcp_oauth_flow import McpOAuthService, OAuthServer
from broker.mcp_tokens import McpTokenStore
from infra.clock import Clock, utc_now
from infra.serving import bind_socket, serve_asgi, socket_url
from infra.settings import McpOAuthClient
from infra.tls import shared_ssl_context
from testing.identity import BrokerHarness, open_broker, start_dev_idp
from tests.fixtures.oidc_provider import node, node_provider, sign_in

__all__ = ["node"]  # a fixture, imported for pytest


@contextlib.asynccontextmanager
async def protected_resource(metadata: dict[str, Any] | None) -> AsyncIterator[str]:
    """An MCP server's URL (``…/mcp``) whose RFC 9728 metadata is ``metadata`` (with
    ``resource`` filled in unless given); ``None``: it publishes none."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    sock = bind_socket("127.0.0.1", 0)
    server_url = f"{socket_url(sock)}/mcp"

    async def well_known(request: Request) -> Response:
        if metadata is None:
            return JSONResponse({"error": "not_found"}, 404)
        return JSONResponse({"resource": server_url, **metadata})

    app = Starlette(routes=[Route("/.well-known/oauth-protected-resource/mcp", well_known)])
    async with serve_asgi(app, sock):
        yield server_url


def _metadata_app(server_url: str, issuer: str) -> Starlette:
    """The RFC 9728 metadata of the MCP server at ``server_url``, naming ``issuer``."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def metadata(request: Request) -> Response:
        scopes = ["openid", "offline_access", "tickets:read"]
        body = {"resource": server_url, "authorization_servers": [issuer]}
        return JSONResponse({**body, "scopes_supported": scopes})

    return Starlette(routes=[Route("/.well-known/oauth-protected-resource/mcp", metadata)])


@contextlib.asynccontextmanager
async def _world(
    node: str, server_url: str, clock: Clock = utc_now
) -> AsyncIterator[tuple[str, httpx.AsyncClient, BrokerHarness]]:
    """The server's authorization server (``oidc-provider`` with registration, issuing
    tokens for ``server_url``), an HTTP client, and the company IdP's broker (links)."""
    async with (
        node_provider(
            node,
            "http://127.0.0.1:9/unused",
            registration=True,
            resource={"url": server_url, "scope": "tickets:read"},
        ) as issuer,
        httpx.AsyncClient(verify=shared_ssl_context()) as http,
        start_dev_idp() as idp,
        open_broker(idp, clock=clock) as harness,
    ):
        yield issuer, http, harness


def _oauth_service(
    server_url: str,
    store: McpTokenStore,
    harness: BrokerHarness,
    http: httpx.AsyncClient,
    redirect_uri: str,
    clock: Clock = utc_now,
) -> McpOAuthService:
    """Per-user OAuth to one server, ``tickets``, for the users ``harness`` links."""
    return McpOAuthService(
        {"tickets": OAuthServer("tickets", server_url)},
        flow=LoginFlow(harness.linking.links, TokenCipher(TokenCipher.generate_key()), clock),
        store=store,
        http=http,
        redirect_uri=redirect_uri,
    )


async def test_oauth_mode_discovers_and_registers_at_a_certified_provider(node: str) -> None:
    async with (
        node_provider(node, "http://127.0.0.1:9/unused", registration=True) as issuer,
        protected_resource({"authorization_servers": [issuer]}) as server_url,
        httpx.AsyncClient(verify=shared_ssl_context()) as http,
    ):
        found = await discover(server_url, http)
        assert found.issuer == issuer
        assert found.resource == server_url
        assert found.token_endpoint == f"{issuer}/token"
        assert found.registration_endpoint == f"{issuer}/reg"
        client = await register(found, "http://127.0.0.1:9/oauth/mcp/callback", http)
        assert client.client_id
        assert client.client_secret
        # The provider knows the client it registered: an authorization request is accepted.
        query = urlencode(
            {
                "client_id": client.client_id,
                "response_type": "code",
                "redirect_uri": "http://127.0.0.1:9/oauth/mcp/callback",
                "scope": "openid",
                "code_challenge": "x" * 43,
                "code_challenge_method": "S256",
            }
        )
        reply = await http.get(f"{found.authorization_endpoint}?{query}")
        assert reply.status_code == 303
        assert "/interaction/" in reply.headers["location"]
        # A configured client is used as is, without registering.
        configured = McpOAuthClient(client_id="by-hand")
        assert (await register(found, "http://x/cb", http, configured=configured)).client_id == (
            "by-hand"
        )


async def test_oauth_discovery_refuses_what_does_not_add_up(node: str) -> None:
    async with (
        node_provider(node, "http://127.0.0.1:9/unused") as issuer,
        httpx.AsyncClient(verify=shared_ssl_context()) as http,
    ):
        async with protected_resource(None) as server_url:
            with pytest.raises(OAuthDiscoveryError, match="no protected-resource metadata"):
                await discover(server_url, http)
        other = {"resource": "https://elsewhere.example/mcp", "authorization_servers": [issuer]}
        async with protected_resource(other) as server_url:
            with pytest.raises(OAuthDiscoveryError, match=r"elsewhere\.example"):
                await discover(server_url, http)
        async with protected_resource({"authorization_servers": [issuer]}) as server_url:
            found = await discover(server_url, http)
            assert found.registration_endpoint is None  # registration off at this provider
            with pytest.raises(OAuthDiscoveryError, match="configure a client"):
                await register(found, "http://x/cb", http)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_oauth_mode_connects_refreshes_and_disconnects_a_user_per_server(
    node: str, backend: str, request: pytest.FixtureRequest
) -> None:
    """The per-user flow end to end: ConnectRequired → the provider's login and consent →
    our callback → a token for exactly that server → refresh → revoke on disconnect. The
    grant is stored sealed, in memory or in the database's ``mcp_oauth_tokens`` table."""
    import jwt

    from broker.mcp_oauth import ConnectRequired
    from broker.mcp_tokens import MemoryMcpTokenStore, SqlMcpTokenStore
    from broker.web import mcp_oauth_routes
    from infra.clock import ManualClock
    from infra.storage import create_engine
    from infra.storage.schema import mcp_oauth_tokens

    resource_sock = bind_socket("127.0.0.1", 0)
    server_url = f"{socket_url(resource_sock)}/mcp"
    callback_sock = bind_socket("127.0.0.1", 0)
    callback_url = f"{socket_url(callback_sock)}/oauth/mcp/callback"
    clock = ManualClock()
    engine = create_engine(request.getfixturevalue("sqlite_url")) if backend == "sqlite" else None
    store: McpTokenStore = (
        MemoryMcpTokenStore() if engine is None else SqlMcpTokenStore(engine, clock)
    )

    async def rows() -> list[tuple[str, str, str]]:
        """What is at rest: (subject, server, sealed grant) rows."""
        if engine is None:
            assert isinstance(store, MemoryMcpTokenStore)
            return [(sub, srv, v) for (sub, srv), v in store.sealed.items()]
        async with engine.connect() as conn:
            result = await conn.execute(
                select(
                    mcp_oauth_tokens.c.subject,
                    mcp_oauth_tokens.c.server,
                    mcp_oauth_tokens.c.grant_encrypted,
                )
            )
            return [(r[0], r[1], r[2]) for r in result.all()]

    async with (
        contextlib.AsyncExitStack() as cleanup,
        _world(node, server_url) as (issuer, http, harness),
    ):
        if engine is not None:
            cleanup.push_async_callback(engine.dispose)
        carol = await harness.link("carol")  # her company account, linked from chat
        service = _oauth_service(server_url, store, harness, http, callback_url, clock)
        resource_app = _metadata_app(server_url, issuer)
        callback_app = Starlette(routes=mcp_oauth_routes(service))
        async with serve_asgi(resource_app, resource_sock), serve_asgi(callback_app, callback_sock):
            with pytest.raises(ConnectRequired) as needed:
                await service.oauth_token(carol, "tickets")
            assert needed.value.server == "tickets"
            async with httpx.AsyncClient(verify=shared_ssl_context()) as browser:
                page = await sign_in(browser, needed.value.authorize_url, "carol", callback_url)
                assert page.status_code == 200, page.text
                assert "opsbot can now use tickets for you" in page.text
                replayed = await browser.get(page.url)  # the same state and code again
            assert replayed.status_code == 400
            assert "already used" in replayed.text

            token = await service.oauth_token(carol, "tickets")
            claims = jwt.decode(token, options={"verify_signature": False})
            assert claims["aud"] == server_url
            assert claims["sub"] == "carol"
            [(subject, server, sealed)] = await rows()
            assert (subject, server) == ("carol", "tickets")
            assert token not in sealed  # encrypted at rest
            assert await service.oauth_token(carol, "tickets") == token  # still fresh

            clock.advance(601)  # past the access token's 600 s (server.mjs ttl): refreshed
            refreshed = await service.oauth_token(carol, "tickets")
            assert refreshed != token
            assert jwt.decode(refreshed, options={"verify_signature": False})["aud"] == server_url

            [(_, _, sealed)] = await rows()
            grant = service._open(sealed)
            _, client = service._setup["tickets"]
            # Unlinking carol's chat account disconnects her servers.
            local = LocalIdentityService(harness.broker, harness.linking, service)
            assert await local.oauth_token(carol, "tickets") == refreshed
            assert await local.unlink(ChatUser("slack", "T-TEST", "U-carol"))
            assert await rows() == []  # unlink deleted her grants (by SQL on the SQL store)
            assert client.client_secret is not None
            assert grant.refresh_token is not None
            refused = await http.post(  # revoked at the authorization server too
                f"{issuer}/token",
                data={"grant_type": "refresh_token", "refresh_token": grant.refresh_token},
                auth=(client.client_id, client.client_secret),
            )
            assert refused.json()["error"] == "invalid_grant"
            with pytest.raises(NotLinkedError):  # unlinked: nobody to connect for
                await service.oauth_token(carol, "tickets")


async def test_connect_links_are_single_use_expire_and_stay_with_their_user(node: str) -> None:
    """A *Connect <server>* link works once, for the flow's ``ttl``, and only while the chat user
    who asked is still linked to the same company account; each refusal is a clear 400."""

    from broker.mcp_oauth import ConnectRequired
    from broker.mcp_tokens import MemoryMcpTokenStore
    from broker.web import mcp_oauth_routes
    from infra.clock import ManualClock

    resource_sock = bind_socket("127.0.0.1", 0)
    server_url = f"{socket_url(resource_sock)}/mcp"
    callback_sock = bind_socket("127.0.0.1", 0)
    callback_url = f"{socket_url(callback_sock)}/oauth/mcp/callback"
    clock = ManualClock()
    store = MemoryMcpTokenStore()
    async with (
        _world(node, server_url, clock) as (issuer, http, harness),
    ):
        carol = await harness.link("carol")
        service = _oauth_service(server_url, store, harness, http, callback_url, clock)
        resource_app = _metadata_app(server_url, issuer)
        callback_app = Starlette(routes=mcp_oauth_routes(service))

        async def connect_url() -> str:
            with pytest.raises(ConnectRequired) as needed:
                await service.oauth_token(carol, "tickets")
            return needed.value.authorize_url

        async with (
            serve_asgi(resource_app, resource_sock),
            serve_asgi(callback_app, callback_sock),
            httpx.AsyncClient(verify=shared_ssl_context()) as browser,
        ):
            stale = await connect_url()
            clock.advance(601)  # past the 10-minute state lifetime
            page = await sign_in(browser, stale, "carol", callback_url)
            assert page.status_code == 400
            assert "expired" in page.text

            # Carol's chat account is unlinked (and linked again) while the link is out:
            # the old link is no longer hers to finish.
            orphaned = await connect_url()
            assert await harness.linking.unlink(carol.chat_user)  # type: ignore[arg-type]
            page = await sign_in(browser, orphaned, "carol", callback_url)
            assert page.status_code == 400
            assert "not linked" in page.text
            assert store.sealed == {}  # nothing was stored for any refused link

            carol = await harness.link("carol")
            page = await sign_in(browser, await connect_url(), "carol", callback_url)
            assert page.status_code == 200, page.text
            assert list(store.sealed) == [("carol", "tickets")]
            assert (await browser.get(page.url)).status_code == 400  # once only


async def test_the_broker_service_hands_out_oauth_tokens_behind_its_secret(node: str) -> None:
    """Multi-process deployments: an instance without the key asks the broker service
    (``/v1/oauth_token``, the same service secret as ``/v1/token``) and finishes a connection
    through it (``/v1/complete_server_connect``); errors keep their class over HTTP."""
    from urllib.parse import parse_qsl, urlsplit

    from broker import BrokerError, InvalidStateError, RemoteBroker
    from broker.mcp_oauth import ConnectRequired
    from broker.mcp_tokens import MemoryMcpTokenStore
    from broker.service import build_service_app
    from testing.identity import SERVICE_SECRET

    broker_sock = bind_socket("127.0.0.1", 0)
    callback_url = f"{socket_url(broker_sock)}/oauth/mcp/callback"
    resource_sock = bind_socket("127.0.0.1", 0)
    server_url = f"{socket_url(resource_sock)}/mcp"
    async with (
        _world(node, server_url) as (issuer, http, harness),
    ):
        carol = await harness.link("carol")
        service = _oauth_service(server_url, MemoryMcpTokenStore(), harness, http, callback_url)
        local = LocalIdentityService(harness.broker, harness.linking, service)
        app = build_service_app(local, SERVICE_SECRET)
        resource_app = _metadata_app(server_url, issuer)
        async with (
            serve_asgi(resource_app, resource_sock),
            serve_asgi(app, broker_sock) as base,  # type: ignore[arg-type]
        ):
            remote = RemoteBroker(base, SERVICE_SECRET, http)
            with pytest.raises(ConnectRequired) as needed:
                await remote.oauth_token(carol, "tickets")
            assert needed.value.server == "tickets"
            async with httpx.AsyncClient(verify=shared_ssl_context()) as browser:
                # The service here serves no browser route: take the redirect's parameters
                # and finish through the API, as an app serving /oauth/mcp/callback does.
                page = await sign_in(browser, needed.value.authorize_url, "carol", callback_url)
            reply = dict(parse_qsl(urlsplit(str(page.url)).query))
            done = await remote.complete_server_connect(
                reply["state"], reply["code"], iss=reply.get("iss")
            )
            assert (done.subject, done.chat_user, done.server) == (
                "carol",
                carol.chat_user,
                "tickets",
            )
            with pytest.raises(InvalidStateError):  # single use, over HTTP too
                await remote.complete_server_connect(reply["state"], reply["code"])
            token = await remote.oauth_token(carol, "tickets")
            import jwt

            claims = jwt.decode(token, options={"verify_signature": False})
            assert (claims["sub"], claims["aud"]) == ("carol", server_url)

            anonymous = await http.post(
                f"{base}/v1/oauth_token", json={"subject": "carol", "server": "tickets"}
            )
            assert anonymous.status_code == 401
            assert token not in anonymous.text
            impostor = RemoteBroker(base, "wrong-secret", http)
            with pytest.raises(BrokerError, match="refused"):
                await impostor.oauth_token(carol, "tickets")


@contextlib.asynccontextmanager
async def _discovered(**as_metadata: Any) -> AsyncIterator[tuple[str, str]]:
    """An MCP server that is its own authorization server, whose RFC 8414 metadata has
    ``as_metadata`` over sound values; yields (server URL, issuer)."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    sock = bind_socket("127.0.0.1", 0)
    issuer = socket_url(sock)
    server_url = f"{issuer}/mcp"
    sound = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
        "code_challenge_methods_supported": ["S256"],
    }

    async def resource(request: Request) -> Response:
        issuers = as_metadata.pop("authorization_servers", [issuer])
        return JSONResponse({"resource": server_url, "authorization_servers": issuers})

    async def server(request: Request) -> Response:
        return JSONResponse({**sound, **as_metadata})

    app = Starlette(
        routes=[
            Route("/.well-known/oauth-protected-resource/mcp", resource),
            Route("/.well-known/oauth-authorization-server", server),
        ]
    )
    async with serve_asgi(app, sock):
        yield server_url, issuer


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("authorization_endpoint", "javascript:alert(document.cookie)//"),
        ("authorization_endpoint", "data:text/html,<script>x</script>"),
        ("token_endpoint", "file:///etc/passwd"),
        ("registration_endpoint", "ftp://127.0.0.1/register"),
        ("revocation_endpoint", "http://[::1/revoke"),
        ("authorization_servers", ["javascript:alert(1)"]),
    ],
)
async def test_discovered_endpoints_are_web_urls(field: str, value: Any) -> None:
    """The authorization URL becomes a *Connect* button people click; the others are called.
    A server's metadata gave a ``javascript:`` link or a ``file:`` endpoint as it was."""
    async with (
        _discovered(**{field: value}) as (server_url, _),
        httpx.AsyncClient(verify=shared_ssl_context()) as http,
    ):
        with pytest.raises(OAuthDiscoveryError, match="is not an http"):
            await discover(server_url, http)


async def test_discovery_takes_sound_metadata_and_scopes_only_as_a_list() -> None:
    async with (
        _discovered(scopes_supported="read write") as (server_url, issuer),
        httpx.AsyncClient(verify=shared_ssl_context()) as http,
    ):
        found = await discover(server_url, http)
    assert found.authorization_endpoint == f"{issuer}/authorize"
    assert found.scopes_supported == ()  # was ("r", "e", "a", "d", " ", "w", ...)
