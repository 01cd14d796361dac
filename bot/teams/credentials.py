"""The bot's outbound credentials: an Entra client-credentials token for the Bot Connector.

The Agents SDK asks a ``Connections`` object for a token provider whenever it builds a
Connector client (every turn and every proactive message). opsbot gives it one provider that
runs the OAuth 2.0 client-credentials grant against the configured token endpoint (Entra's by
default, the fake channel's in tests: MSAL accepts only https authorities) and caches the
token until five minutes before it expires.

Example::

    connections = BotConnections(ClientCredentials(url, app_id, secret, scope, session))
    adapter = CloudAdapter(channel_service_client_factory=RestChannelServiceClientFactory(
        connections))
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import aiohttp
from microsoft_agents.activity import Activity
from microsoft_agents.hosting.core.authorization import (
    AccessTokenProviderBase,
    AgentAuthConfiguration,
    ClaimsIdentity,
    Connections,
)

log = logging.getLogger(__name__)
REFRESH_BEFORE_SECONDS = 300.0


class OutboundAuthError(Exception):
    """The token endpoint refused the bot's credentials or could not be reached."""


@dataclass(eq=False, repr=False)
class ClientCredentials(AccessTokenProviderBase):
    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    default_scope: str
    session: aiohttp.ClientSession
    _: KW_ONLY
    tenant_id: str = ""
    _config: AgentAuthConfiguration = field(init=False)
    _cache: dict[str, tuple[str, float]] = field(default_factory=dict, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    def __post_init__(self) -> None:
        self._config = AgentAuthConfiguration(
            CLIENTID=self.client_id, TENANTID=self.tenant_id, CONNECTIONNAME="SERVICE_CONNECTION"
        )

    @property
    def configuration(self) -> AgentAuthConfiguration:
        return self._config

    async def get_access_token(
        self, resource_url: str, scopes: list[str], force_refresh: bool = False
    ) -> str:
        scope = " ".join(scopes) if scopes else self.default_scope
        cached = self._cache.get(scope)
        if cached and not force_refresh and cached[1] > time.monotonic():
            return cached[0]
        async with self._lock:
            cached = self._cache.get(scope)
            if cached and not force_refresh and cached[1] > time.monotonic():
                return cached[0]
            token, lifetime = await self._fetch(scope)
            self._cache[scope] = (
                token,
                time.monotonic() + max(lifetime - REFRESH_BEFORE_SECONDS, 0),
            )
            return token

    async def _fetch(self, scope: str) -> tuple[str, float]:
        form = {
            "grant_type": "client_credentials",
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "scope": scope,
        }
        try:
            async with self.session.post(
                self.token_url, data=form, timeout=aiohttp.ClientTimeout(total=15)
            ) as response:
                body: Any = await response.json(content_type=None)
                status = response.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise OutboundAuthError(f"token endpoint unreachable: {type(exc).__name__}") from None
        if status != 200 or not isinstance(body, dict) or not body.get("access_token"):
            error = body.get("error") if isinstance(body, dict) else None
            raise OutboundAuthError(f"token endpoint answered {status} ({error})")
        return str(body["access_token"]), float(body.get("expires_in") or 3600)

    def get_token_credential(self) -> Any:
        raise NotImplementedError("opsbot's connector credentials have no azure-core credential")

    # Not used by a single-tenant Teams bot: on-behalf-of and agentic identities.

    async def acquire_token_on_behalf_of(self, scopes: list[str], user_assertion: str) -> str:
        raise NotImplementedError("on-behalf-of is not configured")

    async def get_agentic_application_token(
        self, tenant_id: str, agent_app_instance_id: str
    ) -> str | None:
        raise NotImplementedError("agentic identities are not used")

    async def get_agentic_instance_token(
        self, tenant_id: str, agent_app_instance_id: str
    ) -> tuple[str, str]:
        raise NotImplementedError("agentic identities are not used")

    async def get_agentic_user_token(
        self, tenant_id: str, agent_app_instance_id: str, agentic_user_id: str, scopes: list[str]
    ) -> str | None:
        raise NotImplementedError("agentic identities are not used")


class BotConnections(Connections):
    """One connection (the bot's own) for every Connector call."""

    def __init__(self, provider: AccessTokenProviderBase) -> None:
        self._provider = provider

    def get_connection(self, connection_name: str) -> AccessTokenProviderBase:
        return self._provider

    def get_default_connection(self) -> AccessTokenProviderBase:
        return self._provider

    def get_token_provider(
        self, claims_identity: ClaimsIdentity, service_url: str
    ) -> AccessTokenProviderBase:
        return self._provider

    def get_token_provider_from_activity(
        self, claims_identity: ClaimsIdentity, activity: Activity
    ) -> AccessTokenProviderBase:
        return self._provider

    def get_default_connection_configuration(self) -> AgentAuthConfiguration:
        return self._provider.configuration
