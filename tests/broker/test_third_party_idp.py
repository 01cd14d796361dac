"""Linking against an independent, certified OpenID provider: panva's ``oidc-provider``
(node), not the project's dev IdP (issue 19).

The provider runs from ``testing.oidc_provider`` (pinned, installed by ``.ci/run``; without
node it skips, except under ``CI=true``, where it fails).

What it shows, end to end over HTTP: authorization code + PKCE through the provider's own
login and consent pages to our ``/oauth/callback``; ``prompt=consent`` is what makes it honour
``offline_access`` (without it: no refresh token, a clear refusal); email, name and groups are
not in its ID token (``conformIdTokenClaims``) and come from userinfo; RFC 9207 ``iss`` is in
the response and checked; refresh (``resolve``) and revocation on unlink.

Token exchange (RFC 8693) is not implemented by ``oidc-provider`` (it has no such grant out
of the box); exchange runs against another independent provider, IdentityPython's
``idpyoidc``, in ``test_third_party_exchange.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette

from broker import ChatUser, LocalIdentityService, open_identity_service
from broker.links import TokenCipher
from broker.web import link_routes
from infra.serving import bind_socket, serve_asgi, socket_url
from infra.settings import BrokerSettings, IdpSettings, Settings
from infra.storage import create_engine
from infra.tls import shared_ssl_context
from tests.fixtures.oidc_provider import CLIENT_ID, CLIENT_SECRET, node, node_provider, sign_in

__all__ = ["node"]  # a fixture, imported for pytest

CAROL = ChatUser("slack", "T1", "U-carol")


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
        async with httpx.AsyncClient(verify=shared_ssl_context()) as browser:
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
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
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
        async with httpx.AsyncClient(verify=shared_ssl_context()) as browser:
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
        async with httpx.AsyncClient(verify=shared_ssl_context()) as browser:
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
        async with httpx.AsyncClient(verify=shared_ssl_context()) as browser:
            url = await service.link_url(CAROL)
            page = await sign_in(browser, url, "carol", callback, drop_iss=True)
        assert page.status_code == 502
        assert "does not name its issuer" in page.text
        assert await service.linking.links.get(CAROL) is None
