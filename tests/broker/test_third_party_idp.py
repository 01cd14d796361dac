"""Linking against an independent, certified OpenID provider: panva's ``oidc-provider``
(node), not the project's dev IdP (issue 19).

The provider is pinned in ``tests/oidc_provider/package.json`` (+ lock), installed by
``.ci/run`` with ``npm ci --prefix tests/oidc_provider`` (this test runs it too when
``node_modules`` is missing), and started per test by ``tests/oidc_provider/server.mjs`` on a
free loopback port. Without node it skips, except under ``CI=true``, where it fails.

What it shows, end to end over HTTP: authorization code + PKCE through the provider's own
login and consent pages to our ``/oauth/callback``; ``prompt=consent`` is what makes it honour
``offline_access`` (without it: no refresh token, a clear refusal); email, name and groups are
not in its ID token (``conformIdTokenClaims``) and come from userinfo; RFC 9207 ``iss`` is in
the response and checked; refresh (``resolve``) and revocation on unlink.

Token exchange (RFC 8693) is not implemented by ``oidc-provider`` (it has no such grant out
of the box), so exchange stays covered against the dev IdP (``test_inprocess_broker.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import httpx
import pytest
from starlette.applications import Starlette

from broker import ChatUser, LocalIdentityService, open_identity_service
from broker.links import TokenCipher
from broker.mcp_oauth import McpOAuthClient, OAuthDiscoveryError, discover, register
from broker.web import link_routes
from infra.serving import bind_socket, serve_asgi, socket_url
from infra.settings import BrokerSettings, IdpSettings, Settings
from infra.storage import create_engine

PROVIDER_DIR = Path(__file__).resolve().parents[1] / "oidc_provider"
SERVER = PROVIDER_DIR / "server.mjs"
CLIENT_ID, CLIENT_SECRET = "opsbot", "opsbot-third-party-secret"
CAROL = ChatUser("slack", "T1", "U-carol")
ACCOUNTS = {"carol": {"email": "carol@example.com", "name": "Carol", "groups": ["sre", "oncall"]}}


def _unavailable(reason: str) -> None:
    if Settings(_env_file=None).ci:  # type: ignore[call-arg]
        pytest.fail(f"{reason} (CI=true: the third-party OpenID provider test must run)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def node() -> str:
    """The node binary, with the pinned provider installed (``npm ci`` if it is missing)."""
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed (Debian: apt-get install nodejs npm)")
    assert node is not None
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").exists():
        npm = shutil.which("npm")
        if npm is None:
            _unavailable("npm is not installed, and tests/oidc_provider/node_modules is missing")
        assert npm is not None
        try:
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--prefix", str(PROVIDER_DIR)],
                check=True,
                capture_output=True,
                timeout=300,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            output = getattr(exc, "stderr", b"") or b""
            tail = output.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
            _unavailable(f"could not install oidc-provider with npm ci: {tail[0]}")
    return node


@contextlib.asynccontextmanager
async def node_provider(
    node: str,
    redirect_uri: str,
    *,
    registration: bool = False,
    resource: dict[str, str] | None = None,
) -> AsyncIterator[str]:
    """``oidc-provider`` with one confidential client (and RFC 7591 registration if asked);
    its issuer URL while the block runs."""
    config = {
        "registration": registration,
        "resource": resource,
        "clients": [
            {
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "client_secret_basic",
            }
        ],
        "accounts": ACCOUNTS,
    }
    process = await asyncio.create_subprocess_exec(
        node,
        str(SERVER),
        json.dumps(config),
        cwd=PROVIDER_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        except TimeoutError:
            line = b""
        issuer = line.decode().strip()
        if not issuer.startswith("http://127.0.0.1:"):
            process.kill()
            errors = (await process.stderr.read()).decode(errors="replace")[-2000:]
            pytest.fail(f"oidc-provider did not start: {errors}")
        yield issuer
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_INPUT = re.compile(r"<input([^>]*)>")
_ATTR = re.compile(r'(\w+)="([^"]*)"')


async def sign_in(
    http: httpx.AsyncClient, url: str, login: str, callback_url: str, *, drop_iss: bool = False
) -> httpx.Response:
    """Walk the provider's login and consent pages as a browser would, until it redirects to
    ``callback_url``; our callback's response (``drop_iss`` removes RFC 9207 ``iss`` first)."""
    response = await http.get(url)
    for _ in range(12):
        if response.is_redirect:
            target = urljoin(str(response.url), response.headers["location"])
            if target.startswith(callback_url):
                if drop_iss:
                    parts = urlsplit(target)
                    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "iss"]
                    target = urlunsplit(parts._replace(query=urlencode(query)))
                return await http.get(target)
            response = await http.get(target)
            continue
        assert response.status_code == 200, response.text[:500]
        form = _FORM.search(response.text)
        assert form is not None, response.text[:500]
        fields: dict[str, str] = {}
        for attrs in _INPUT.findall(form.group(2)):
            found = dict(_ATTR.findall(attrs))
            if "name" in found:
                fields[found["name"]] = unescape(found.get("value", ""))
        if "login" in fields:
            fields.update(login=login, password="any password")  # dev interactions
        action = urljoin(str(response.url), unescape(form.group(1)))
        response = await http.post(action, data=fields)
    raise AssertionError("the provider never redirected back to the callback")


@contextlib.asynccontextmanager
async def linking_against_provider(
    node: str, tmp_path: Path, sqlite_url: str, **idp: Any
) -> AsyncIterator[tuple[LocalIdentityService, str, str]]:
    """The in-process identity service built from Settings for the provider, and our callback
    served over HTTP: (service, callback URL, issuer)."""
    sock = bind_socket("127.0.0.1", 0)
    callback_url = f"{socket_url(sock)}/oauth/callback"
    engine = create_engine(sqlite_url)
    try:
        async with node_provider(node, callback_url) as issuer:
            settings = Settings(  # type: ignore[call-arg]
                _env_file=None,
                data_dir=tmp_path,
                idp=IdpSettings(
                    issuer=issuer,
                    client_id=CLIENT_ID,
                    client_secret=CLIENT_SECRET,  # type: ignore[arg-type]
                    scopes=["openid", "profile", "email", "groups", "offline_access"],
                    **idp,
                ),
                broker=BrokerSettings(
                    link_callback_url=callback_url,
                    link_encryption_key=TokenCipher.generate_key(),  # type: ignore[arg-type]
                ),
                mcp_servers=[],
            )
            async with open_identity_service(settings, engine) as service:
                assert isinstance(service, LocalIdentityService)
                app = Starlette(routes=link_routes(service.linking))
                async with serve_asgi(app, sock):
                    yield service, callback_url, issuer
    finally:
        await engine.dispose()


async def test_link_refresh_and_unlink_against_a_certified_provider(
    node: str, tmp_path: Path, sqlite_url: str
) -> None:
    async with linking_against_provider(node, tmp_path, sqlite_url, prompt="consent") as (
        service,
        callback_url,
        issuer,
    ):
        url = await service.link_url(CAROL)
        async with httpx.AsyncClient() as browser:
            page = await sign_in(browser, url, "carol", callback_url)
        assert page.status_code == 200, page.text
        assert "Connected as carol@example.com" in page.text  # email from userinfo
        link = await service.linking.links.get(CAROL)
        assert link is not None
        assert link.subject == "carol"

        # Refresh (the broker's subject token) works, and groups come from userinfo.
        identity = await service.resolve(CAROL)
        assert identity is not None
        assert identity.groups == frozenset({"sre", "oncall"})

        # Unlink revokes the refresh token at the provider.
        refresh_token = await service.linking.links.refresh_token(CAROL)
        assert refresh_token is not None
        assert await service.unlink(CAROL)
        async with httpx.AsyncClient() as http:
            refused = await http.post(
                f"{issuer}/token",
                data={"grant_type": "refresh_token", "refresh_token": refresh_token},
                auth=(CLIENT_ID, CLIENT_SECRET),
            )
        assert refused.status_code == 400
        assert refused.json()["error"] == "invalid_grant"


async def test_without_consent_the_provider_drops_offline_access_and_linking_says_so(
    node: str, tmp_path: Path, sqlite_url: str
) -> None:
    async with linking_against_provider(node, tmp_path, sqlite_url) as (service, callback, _):
        async with httpx.AsyncClient() as browser:
            page = await sign_in(browser, await service.link_url(CAROL), "carol", callback)
        assert page.status_code == 502
        assert "no ID token or refresh token" in page.text
        assert await service.linking.links.get(CAROL) is None


async def test_without_the_userinfo_fallback_its_id_token_lacks_email_and_groups(
    node: str, tmp_path: Path, sqlite_url: str
) -> None:
    async with linking_against_provider(
        node, tmp_path, sqlite_url, prompt="consent", userinfo_fallback=False
    ) as (service, callback, _):
        async with httpx.AsyncClient() as browser:
            page = await sign_in(browser, await service.link_url(CAROL), "carol", callback)
        assert page.status_code == 200, page.text
        assert "Connected as carol." in page.text  # the subject: no email in the ID token
        identity = await service.resolve(CAROL)
        assert identity is not None
        assert identity.groups == frozenset()


async def test_a_response_stripped_of_its_iss_is_refused(
    node: str, tmp_path: Path, sqlite_url: str
) -> None:
    async with linking_against_provider(node, tmp_path, sqlite_url, prompt="consent") as (
        service,
        callback,
        _,
    ):
        async with httpx.AsyncClient() as browser:
            url = await service.link_url(CAROL)
            page = await sign_in(browser, url, "carol", callback, drop_iss=True)
        assert page.status_code == 502
        assert "does not name its issuer" in page.text
        assert await service.linking.links.get(CAROL) is None


# -- the oauth auth mode's discovery and registration (broker.mcp_oauth) -----------------


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


async def test_oauth_mode_discovers_and_registers_at_a_certified_provider(node: str) -> None:
    async with (
        node_provider(node, "http://127.0.0.1:9/unused", registration=True) as issuer,
        protected_resource({"authorization_servers": [issuer]}) as server_url,
        httpx.AsyncClient() as http,
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
        httpx.AsyncClient() as http,
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


async def test_oauth_mode_connects_refreshes_and_disconnects_a_user_per_server(
    node: str,
) -> None:
    """The per-user flow end to end: ConnectRequired → the provider's login and consent →
    our callback → a token for exactly that server → refresh → revoke on disconnect."""
    import jwt
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from broker.mcp_oauth import ConnectRequired
    from broker.mcp_oauth_flow import McpOAuthService, MemoryMcpTokenStore, OAuthServer
    from broker.web import mcp_oauth_routes
    from infra.clock import ManualClock

    resource_sock = bind_socket("127.0.0.1", 0)
    server_url = f"{socket_url(resource_sock)}/mcp"
    callback_sock = bind_socket("127.0.0.1", 0)
    callback_url = f"{socket_url(callback_sock)}/oauth/mcp/callback"
    clock = ManualClock()
    store = MemoryMcpTokenStore()
    async with (
        node_provider(
            node,
            "http://127.0.0.1:9/unused",
            registration=True,
            resource={"url": server_url, "scope": "tickets:read"},
        ) as issuer,
        httpx.AsyncClient() as http,
    ):
        service = McpOAuthService(
            {"tickets": OAuthServer("tickets", server_url)},
            store=store,
            cipher=TokenCipher(TokenCipher.generate_key()),
            http=http,
            redirect_uri=callback_url,
            clock=clock,
        )

        async def metadata(request: Request) -> Response:
            return JSONResponse(
                {
                    "resource": server_url,
                    "authorization_servers": [issuer],
                    "scopes_supported": ["openid", "offline_access", "tickets:read"],
                }
            )

        resource_app = Starlette(
            routes=[Route("/.well-known/oauth-protected-resource/mcp", metadata)]
        )
        callback_app = Starlette(routes=mcp_oauth_routes(service))
        async with serve_asgi(resource_app, resource_sock), serve_asgi(callback_app, callback_sock):
            with pytest.raises(ConnectRequired) as needed:
                await service.oauth_token("carol", "tickets")
            assert needed.value.server == "tickets"
            async with httpx.AsyncClient() as browser:
                page = await sign_in(browser, needed.value.authorize_url, "carol", callback_url)
            assert page.status_code == 200, page.text
            assert "opsbot can now use tickets for you" in page.text

            token = await service.oauth_token("carol", "tickets")
            claims = jwt.decode(token, options={"verify_signature": False})
            assert claims["aud"] == server_url
            assert claims["sub"] == "carol"
            assert token not in store.sealed[("carol", "tickets")]  # encrypted at rest
            assert await service.oauth_token("carol", "tickets") == token  # still fresh

            clock.advance(601)  # past the access token's 600 s (server.mjs ttl): refreshed
            refreshed = await service.oauth_token("carol", "tickets")
            assert refreshed != token
            assert jwt.decode(refreshed, options={"verify_signature": False})["aud"] == server_url

            grant = service._open(store.sealed[("carol", "tickets")])
            _, client = service._setup["tickets"]
            await service.disconnect("carol")
            assert store.sealed == {}
            assert client.client_secret is not None
            assert grant.refresh_token is not None
            refused = await http.post(  # revoked at the authorization server too
                f"{issuer}/token",
                data={"grant_type": "refresh_token", "refresh_token": grant.refresh_token},
                auth=(client.client_id, client.client_secret),
            )
            assert refused.json()["error"] == "invalid_grant"
            with pytest.raises(ConnectRequired):
                await service.oauth_token("carol", "tickets")
