"""Build a broker from configuration values (or from opsbot's ``Settings``)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Required, TypedDict, Unpack

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from broker.claims import ClaimNames
from broker.exchange import ClientAuthMethod, ClientCredentials, TargetParam, TokenEndpointClient
from broker.inprocess import InProcessBroker, ServerTarget
from broker.linking import LinkingService
from broker.links import LinkStore, SqlLinkStore, TokenCipher
from broker.local import LocalIdentityService
from broker.login_state import LoginFlow
from broker.mcp_oauth_flow import McpOAuthService, OAuthServer
from broker.mcp_tokens import SqlMcpTokenStore
from broker.metrics import BrokerMetrics
from broker.oidc import OidcProvider
from broker.remote import RemoteBroker
from broker.sso import SsoLinker, SsoPolicy
from broker.types import IdentityService
from infra.clock import Clock, utc_now
from infra.http_responses import ReleasingTransport
from infra.tls import shared_ssl_context

if TYPE_CHECKING:
    from infra.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=3.0)


class TokenClientOptions(TypedDict, total=False):
    """How opsbot's client reaches the IdP's token endpoint: ``open_token_client``'s keywords,
    which ``open_inprocess_broker`` passes on whole (so they are listed once)."""

    issuer: Required[str]
    client_id: Required[str]
    client_secret: Required[str]
    auth_method: ClientAuthMethod  # default "client_secret_basic"
    target_param: TargetParam  # default "audience"
    token_url: str | None  # default: the one the issuer's metadata names
    clock: Clock
    http: httpx.AsyncClient | None  # default: a pool of its own, closed on exit


# httpx's own default connection limits.
DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


def http_client(limits: httpx.Limits = DEFAULT_LIMITS) -> httpx.AsyncClient:
    """The broker's HTTP client (to the IdP, the broker service, MCP authorization servers):
    the shared TLS context, and each response freed as it closes (``infra.http_responses``)."""
    transport = httpx.AsyncHTTPTransport(verify=shared_ssl_context(), limits=limits)
    # ``verify`` again on the client: it builds the transports of proxies from the environment.
    return httpx.AsyncClient(
        timeout=DEFAULT_TIMEOUT,
        verify=shared_ssl_context(),
        transport=ReleasingTransport(transport),
    )


@contextlib.asynccontextmanager
async def open_token_client(
    **options: Unpack[TokenClientOptions],
) -> AsyncIterator[TokenEndpointClient]:
    """A token-endpoint client with its own HTTP connection pool (unless ``http`` is given)."""
    clock = options.get("clock", utc_now)
    credentials = ClientCredentials(
        options["client_id"],
        options["client_secret"],
        options.get("auth_method", "client_secret_basic"),
    )
    async with contextlib.AsyncExitStack() as stack:
        http = options.get("http")
        if http is None:
            limits = httpx.Limits(max_connections=50, max_keepalive_connections=20)
            http = await stack.enter_async_context(http_client(limits))
        token_url = options.get("token_url")
        provider = OidcProvider(options["issuer"], http, token_url=token_url, clock=clock)
        yield TokenEndpointClient(
            provider, http, credentials, target_param=options.get("target_param", "audience")
        )


@contextlib.asynccontextmanager
async def open_inprocess_broker(
    *,
    servers: Iterable[ServerTarget],
    links: LinkStore,
    cache_margin: timedelta = timedelta(seconds=30),
    metrics: BrokerMetrics | None = None,
    groups_max_age: timedelta = timedelta(seconds=60),
    claims: ClaimNames = ClaimNames(),  # noqa: B008 (frozen)
    userinfo_fallback: bool = True,
    **token_client: Unpack[TokenClientOptions],
) -> AsyncIterator[InProcessBroker]:
    """An ``InProcessBroker`` talking to ``issuer``; closes its HTTP client on exit."""
    async with open_token_client(**token_client) as client:
        yield InProcessBroker(
            links=links,
            client=client,
            servers=servers,
            clock=token_client.get("clock", utc_now),
            cache_margin=cache_margin,
            metrics=metrics,
            groups_max_age=groups_max_age,
            claims=claims,
            userinfo_fallback=userinfo_fallback,
        )


def load_link_cipher(key: str | None, data_dir: Path) -> TokenCipher:
    """The cipher for refresh tokens at rest: the configured key, or — for development only —
    a random key generated once into ``data_dir/link-encryption.key`` (mode 0600)."""
    if key:
        return TokenCipher(key)
    path = data_dir / "link-encryption.key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(TokenCipher.generate_key())
        log.warning("no link encryption key configured: generated one at %s (development)", path)
    return TokenCipher(path.read_text().strip())


@contextlib.asynccontextmanager
async def open_identity_service(
    settings: Settings, engine: AsyncEngine | None = None, *, clock: Clock = utc_now
) -> AsyncIterator[IdentityService]:
    """The configured ``IdentityService``: in-process (needs ``engine``) or the remote service.

    In-process, the result is a ``LocalIdentityService``; mount
    ``broker.web.link_routes(service.linking)`` on the app that serves
    ``settings.broker.link_callback_url``.
    """
    if settings.broker.mode == "remote":
        async with http_client() as http:
            yield RemoteBroker(
                settings.broker.service_url,
                settings.broker.service_secret.get_secret_value(),
                http,
            )
        return
    if engine is None:
        raise ValueError("the in-process broker needs the database engine for account links")
    key = settings.broker.link_encryption_key
    cipher = load_link_cipher(key.get_secret_value() if key else None, settings.data_dir)
    links = SqlLinkStore(engine, cipher, clock)
    idp = settings.idp
    common: TokenClientOptions = {
        "issuer": idp.issuer,
        "client_id": idp.client_id,
        "client_secret": idp.client_secret.get_secret_value(),
        "auth_method": idp.client_auth_method,
        "token_url": idp.token_url,
        "clock": clock,
    }
    # The broker's client exchanges tokens (its target parameter); the login client does not.
    exchange: TokenClientOptions = {**common, "target_param": idp.exchange_target_param}
    targets = [ServerTarget(name, aud) for name, aud in settings.exchange_audiences.items()]
    claims = ClaimNames(groups=idp.groups_claim, email=idp.email_claim, name=idp.name_claim)
    async with (
        open_inprocess_broker(
            **exchange,
            servers=targets,
            links=links,
            cache_margin=timedelta(seconds=settings.broker.cache_margin_seconds),
            groups_max_age=timedelta(seconds=settings.broker.groups_max_age_seconds),
            claims=claims,
            userinfo_fallback=idp.userinfo_fallback,
        ) as broker,
        open_token_client(**common) as login_client,
        http_client() as mcp_http,
    ):
        # Account links and MCP server connections: one store, key, clock and state lifetime.
        flow = LoginFlow(
            links, cipher, clock, timedelta(seconds=settings.broker.link_state_ttl_seconds)
        )
        linking = LinkingService(
            flow=flow,
            client=login_client,
            redirect_uri=settings.broker.link_callback_url,
            scope=" ".join(idp.scopes),
            prompt=idp.prompt,
            claims=claims,
            userinfo_fallback=idp.userinfo_fallback,
        )
        sso_audience = settings.teams.sso_audience
        sso = (
            SsoLinker(
                linking,
                SsoPolicy(
                    sso_audience, settings.teams.served_tenants, app_id=settings.teams.app_id
                ),
            )
            if sso_audience is not None
            else None
        )
        yield LocalIdentityService(
            broker, linking, _mcp_oauth(settings, engine, flow, mcp_http), sso
        )


def _mcp_oauth(
    settings: Settings, engine: AsyncEngine, flow: LoginFlow, http: httpx.AsyncClient
) -> McpOAuthService | None:
    """Per-user OAuth for the servers in ``oauth`` mode (none configured: ``None``)."""
    servers = {
        s.name: OAuthServer(s.name, s.url, s.oauth)
        for s in settings.mcp_servers
        if s.auth == "oauth"
    }
    if not servers:
        return None
    return McpOAuthService(
        servers,
        flow=flow,
        store=SqlMcpTokenStore(engine, flow.clock),
        http=http,
        redirect_uri=settings.broker.mcp_oauth_callback_url,
    )
