"""Connector clients that share pooled HTTP sessions.

The SDK's ``RestChannelServiceClientFactory`` builds a new ``aiohttp.ClientSession`` (and so a
new TCP connection) for every turn and every proactive message, twice (the Connector and the
user-token service), and closes them at the end of the turn. Under a burst that is most of
the work of an acknowledgement and of each answer. This factory hands out clients over one
session per (endpoint, bearer token), kept open across turns and closed with the bot.

Example::

    factory = PooledClientFactory(connections)
    cloud = CloudAdapter(channel_service_client_factory=factory)
    ...
    await factory.close()
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import ClientSession, ClientTimeout
from microsoft_agents.hosting.core import RestChannelServiceClientFactory, TurnContext
from microsoft_agents.hosting.core.authorization import (
    AuthenticationConstants,
    ClaimsIdentity,
    Connections,
)
from microsoft_agents.hosting.core.connector import ConnectorClientBase, get_product_info
from microsoft_agents.hosting.core.connector.client import UserTokenClient
from microsoft_agents.hosting.core.connector.client.agent_sign_in import AgentSignIn
from microsoft_agents.hosting.core.connector.client.connector_client import (
    AttachmentsOperations,
    ConversationsOperations,
)
from microsoft_agents.hosting.core.connector.client.user_token import UserToken
from microsoft_agents.hosting.core.connector.teams import TeamsConnectorClient

log = logging.getLogger(__name__)
# The Connector answers in well under a second; a hung call must not hold a run forever.
REQUEST_TIMEOUT = ClientTimeout(total=30)


class _SharedConnectorClient(TeamsConnectorClient):
    """A Connector client over a session the factory configured (headers included): the
    SDK's constructor would look up its own package version on disk for the User-Agent on
    every turn (``get_product_info`` scans site-packages), once per client."""

    def __init__(self, session: ClientSession) -> None:
        self.client = session
        self._attachments = AttachmentsOperations(session)
        self._conversations = ConversationsOperations(session)

    async def close(self) -> None:
        """The session belongs to the factory: it outlives the turn."""


class _SharedUserTokenClient(UserTokenClient):
    def __init__(self, session: ClientSession, app_id: str) -> None:
        self._app_id = app_id
        self.client = session
        self._agent_sign_in = AgentSignIn(session)
        self._user_token = UserToken(session)

    async def close(self) -> None:
        """The session belongs to the factory: it outlives the turn."""


class PooledClientFactory(RestChannelServiceClientFactory):
    def __init__(
        self,
        connection_manager: Connections,
        token_service_endpoint: str = AuthenticationConstants.AGENTS_SDK_OAUTH_URL,
        token_service_audience: str = AuthenticationConstants.AGENTS_SDK_SCOPE,
    ) -> None:
        super().__init__(connection_manager, token_service_endpoint, token_service_audience)
        self._connections = connection_manager
        self._token_endpoint = token_service_endpoint
        self._token_audience = token_service_audience
        self._sessions: dict[tuple[str, str], ClientSession] = {}
        self._user_agent = get_product_info()

    def _session(self, endpoint: str, token: str) -> ClientSession:
        endpoint = endpoint if endpoint.endswith("/") else f"{endpoint}/"
        key = (endpoint, token)
        session = self._sessions.get(key)
        if session is None or session.closed:
            # A new token for this endpoint: the old token's session is closed once its
            # requests in flight are done (aiohttp finishes them before closing).
            for old_key in [k for k in self._sessions if k[0] == endpoint]:
                stale = self._sessions.pop(old_key)
                if not stale.closed:
                    _close_later(stale)
            headers = {
                "Accept": "application/json",
                "Content-Type": "application/json",
                "User-Agent": self._user_agent,
            }
            if len(token) > 1:
                headers["Authorization"] = f"Bearer {token}"
            session = ClientSession(base_url=endpoint, timeout=REQUEST_TIMEOUT, headers=headers)
            self._sessions[key] = session
        return session

    async def create_connector_client(
        self,
        context: TurnContext | None,
        claims_identity: ClaimsIdentity,
        service_url: str,
        audience: str,
        scopes: list[str] | None = None,
        use_anonymous: bool = False,
    ) -> ConnectorClientBase:
        if not service_url:
            raise TypeError("create_connector_client: service_url is required")
        provider = self._connections.get_token_provider(claims_identity, service_url)
        token = await provider.get_access_token(
            audience, scopes or claims_identity.get_token_scope()
        )
        return _SharedConnectorClient(self._session(service_url, token))

    async def create_user_token_client(
        self,
        context: TurnContext,
        claims_identity: ClaimsIdentity,
        use_anonymous: bool = False,
    ) -> UserTokenClient:
        provider = self._connections.get_token_provider(claims_identity, self._token_endpoint)
        token = await provider.get_access_token(
            self._token_audience, claims_identity.get_token_scope()
        )
        return _SharedUserTokenClient(
            self._session(self._token_endpoint, token), claims_identity.get_app_id() or ""
        )

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()


_closing: set[asyncio.Future[None]] = set()


def _close_later(session: ClientSession) -> None:
    task = asyncio.ensure_future(session.close())
    _closing.add(task)
    task.add_done_callback(_closing.discard)
