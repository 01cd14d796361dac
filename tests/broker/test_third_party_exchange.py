"""Token exchange (RFC 8693) against an independent OpenID provider: IdentityPython's
``idpyoidc`` (the library of its OpenID-certified OP), not the project's dev IdP (issue 19).

The provider runs from ``testing.idpy_provider`` (a pinned dev dependency; without the
package it skips, except under ``CI=true``, where it fails) on a loopback port; the exchange
is its own token-exchange helper and policy, configured with the audiences it may issue for.

What it shows, end to end over HTTP: carol links at idpyoidc (authorization code + PKCE
through opsbot's linking; ``prompt=consent``, which OIDC Core requires for
``offline_access``); the broker, built from ``Settings`` as production builds it, refreshes her
sign-in and exchanges it at idpyoidc's token endpoint for the ticketing server's audience; the
ticketing reference server, trusting idpyoidc's issuer (JWKS by discovery), accepts the token on
a ``get_ticket`` call. The exchanged token's ``aud`` is the server's and its ``sub`` carol's;
idpyoidc gives it a fresh lifetime, and opsbot caps it at the subject token's expiry. It has
no ``act`` claim (optional in RFC 8693) but names opsbot in ``client_id``, which opsbot takes.

Refusals are opsbot's errors, never a traceback: an audience the provider's policy does not
allow is ``ExchangeFailedError`` (``invalid_target``); a sign-in revoked at the provider is
``AccessRevokedError`` (the link is marked broken); an expired subject token, which RFC 8693
answers with ``invalid_request``, is refreshed once and exchanged again.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from starlette.applications import Starlette

from broker import (
    BrokerUnavailableError,
    ChatUser,
    ExchangeFailedError,
    Identity,
    LocalIdentityService,
    open_identity_service,
)
from broker.links import TokenCipher
from broker.web import link_routes
from infra.clock import Clock, ManualClock, utc_now
from infra.serving import bind_socket, serve_asgi, socket_url
from infra.settings import BrokerSettings, IdpSettings, McpServerSettings, Settings
from infra.storage import create_engine
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers, start_reference_servers
from testing.idpy_provider import (
    CLIENT_ID,
    CLIENT_SCOPES,
    CLIENT_SECRET,
    RunningIdpyProvider,
    run_idpy_provider,
)
from testing.mcp import call_tool_once

CAROL = ChatUser("slack", "T1", "U-carol")


@pytest.fixture(scope="session")
def idpyoidc() -> None:
    """The provider's package is installed (a dev dependency: ``uv sync``)."""
    if importlib.util.find_spec("idpyoidc") is None:
        reason = "idpyoidc is not installed (uv sync --all-extras installs the dev group)"
        if Settings(_env_file=None).ci:
            pytest.fail(f"{reason} (CI=true: the third-party token exchange test must run)")
        pytest.skip(reason)


@dataclass
class Deployment:
    service: LocalIdentityService
    provider: RunningIdpyProvider
    servers: ReferenceServers


@contextlib.asynccontextmanager
async def exchanging_at_idpy(
    tmp_path: Path,
    sqlite_url: str,
    *,
    more_servers: tuple[McpServerSettings, ...] = (),
    clock: Clock = utc_now,
    access_token_lifetime: int = 3600,
    cache_margin_seconds: int = 30,
) -> AsyncIterator[Deployment]:
    """idpyoidc, the reference MCP servers trusting it, and the in-process identity service
    built from Settings with ticketing in ``exchange`` mode; our callback served over HTTP."""
    provider_sock, callback_sock = bind_socket("127.0.0.1", 0), bind_socket("127.0.0.1", 0)
    callback_url = f"{socket_url(callback_sock)}/oauth/callback"
    engine = create_engine(sqlite_url)
    try:
        async with start_reference_servers(
            issuer=socket_url(provider_sock), data_dir=tmp_path / "mcp"
        ) as servers:
            ticketing = servers.ticketing
            async with run_idpy_provider(
                callback_url,
                [ticketing.audience],
                sock=provider_sock,
                access_token_lifetime=access_token_lifetime,
            ) as provider:
                settings = Settings(  # type: ignore[call-arg]
                    _env_file=None,
                    data_dir=tmp_path,
                    idp=IdpSettings(
                        issuer=provider.issuer,
                        client_id=CLIENT_ID,
                        client_secret=CLIENT_SECRET,  # type: ignore[arg-type]
                        scopes=CLIENT_SCOPES,
                        prompt="consent",
                        exchange_target_param="audience",
                    ),
                    broker=BrokerSettings(
                        link_callback_url=callback_url,
                        link_encryption_key=TokenCipher.generate_key(),  # type: ignore[arg-type]
                        cache_margin_seconds=cache_margin_seconds,
                    ),
                    mcp_servers=[
                        McpServerSettings(
                            name="ticketing", url=ticketing.url, audience=ticketing.audience
                        ),
                        *more_servers,
                    ],
                )
                async with open_identity_service(settings, engine, clock=clock) as service:
                    assert isinstance(service, LocalIdentityService)
                    app = Starlette(routes=link_routes(service.linking))
                    async with serve_asgi(app, callback_sock):
                        yield Deployment(service, provider, servers)
    finally:
        await engine.dispose()


async def link_carol(service: LocalIdentityService) -> Identity:
    """Carol connects her account from chat: the provider signs her in (no form) and sends
    her browser back to our callback."""
    async with httpx.AsyncClient(verify=shared_ssl_context(), follow_redirects=True) as browser:
        page = await browser.get(await service.link_url(CAROL))
    assert page.status_code == 200, page.text
    assert "Connected as carol@example.com" in page.text
    identity = await service.resolve(CAROL)
    assert identity is not None
    return identity


def unverified(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return claims


async def test_an_exchanged_token_from_idpyoidc_is_accepted_by_the_ticketing_server(
    idpyoidc: None, tmp_path: Path, sqlite_url: str
) -> None:
    async with exchanging_at_idpy(tmp_path, sqlite_url) as deployment:
        service, ticketing = deployment.service, deployment.servers.ticketing
        carol = await link_carol(service)
        assert carol.groups == {"team-payments", "sre"}
        # The sign-in the broker exchanges (refreshed by ``resolve``, cached since).
        subject = await service.broker._subject_token(carol)
        subject_exp = unverified(subject.value)["exp"]
        # Into the next second, so a lifetime counted from the exchange shows.
        await asyncio.sleep(1.05 - time.time() % 1)

        token = await service.get_token(carol, "ticketing")
        claims = unverified(token.value)
        assert claims["iss"] == deployment.provider.issuer
        assert claims["aud"] == [ticketing.audience]
        assert token.audience == ticketing.audience
        assert claims["sub"] == carol.subject
        assert claims["client_id"] == CLIENT_ID
        assert "act" not in claims  # impersonation semantics: RFC 8693 makes act optional
        assert set(claims["scope"].split()) >= {"tickets:read"}
        # idpyoidc counts the exchanged token's lifetime from the exchange; opsbot caps it.
        assert claims["exp"] > subject_exp
        assert token.expires_at == subject.expires_at
        assert token.expires_at.timestamp() <= subject_exp

        result = await call_tool_once(ticketing, token.value, "get_ticket", {"key": "PAY-101"})
        assert not result.isError, result.content
        assert result.structuredContent is not None
        assert result.structuredContent["key"] == "PAY-101"


async def test_an_audience_the_provider_does_not_allow_is_a_clear_exchange_error(
    idpyoidc: None, tmp_path: Path, sqlite_url: str
) -> None:
    payroll = McpServerSettings(
        name="payroll", url="http://127.0.0.1:9/mcp", audience="https://payroll.example/mcp"
    )
    async with exchanging_at_idpy(tmp_path, sqlite_url, more_servers=(payroll,)) as deployment:
        carol = await link_carol(deployment.service)
        with pytest.raises(ExchangeFailedError) as refused:
            await deployment.service.get_token(carol, "payroll")
        assert refused.value.server == "payroll"
        assert "invalid_target" in refused.value.reason
        # The refusal is about that audience only.
        assert await deployment.service.get_token(carol, "ticketing")


async def test_a_revoked_subject_token_is_refreshed_then_an_ended_sign_in_is_refused(
    idpyoidc: None, tmp_path: Path, sqlite_url: str
) -> None:
    async with exchanging_at_idpy(tmp_path, sqlite_url) as deployment:
        service, provider = deployment.service, deployment.provider
        carol = await link_carol(service)
        first = await service.get_token(carol, "ticketing")
        # The access token the broker holds as carol's subject token is revoked (RFC 7009, at
        # the provider's revocation endpoint); her refresh token still stands.
        subject = await service.broker._subject_token(carol)
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            revoked = await http.post(
                f"{provider.issuer}/revocation",
                data={"token": subject.value, "token_type_hint": "access_token"},
                auth=(CLIENT_ID, CLIENT_SECRET),
            )
        assert revoked.status_code == 200, revoked.text
        await service.invalidate(carol, "ticketing")  # a new exchange, same subject token
        refreshes = service.broker.metrics.refreshes
        again = await service.get_token(carol, "ticketing")  # refused once, then refreshed
        assert again.value != first.value
        assert service.broker.metrics.refreshes == refreshes + 1

        # The provider ends the whole sign-in: nothing is minted any more, and opsbot says
        # so. (idpyoidc refuses the revoked refresh token with invalid_request where RFC 6749
        # §5.2 says invalid_grant, so opsbot reports the refusal in the provider's words
        # instead of reading it as a revocation: AccessRevokedError with conformant ones.)
        refresh_token = await service.linking.links.refresh_token(CAROL)
        assert refresh_token is not None
        provider.end_sign_in(refresh_token)
        await service.broker.invalidate_user(carol.subject)
        with pytest.raises(BrokerUnavailableError) as refused:
            await service.get_token(carol, "ticketing")
        assert str(refused.value) == (
            "refreshing the sign-in failed: invalid_request: Refresh token inactive"
        )


async def test_an_expired_subject_token_is_refreshed_and_exchanged_again(
    idpyoidc: None, tmp_path: Path, sqlite_url: str
) -> None:
    # opsbot's clock stands still, so it keeps using a subject token idpyoidc has let expire
    # (what clock skew between the two does).
    async with exchanging_at_idpy(
        tmp_path,
        sqlite_url,
        clock=ManualClock(),
        access_token_lifetime=1,
        cache_margin_seconds=0,
    ) as deployment:
        service = deployment.service
        carol = await link_carol(service)
        first = await service.get_token(carol, "ticketing")
        refreshes = service.broker.metrics.refreshes
        await asyncio.sleep(2.05)
        await service.invalidate(carol, "ticketing")
        again = await service.get_token(carol, "ticketing")
        assert again.value != first.value
        assert service.broker.metrics.refreshes == refreshes + 1
