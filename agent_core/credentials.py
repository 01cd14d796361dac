"""Which credential a run sends to each MCP server: its auth mode decides.

- ``exchange`` (default): the requester's own token, minted by the broker (RFC 8693) for this
  server's audience. It goes to that server only, and only if its audience matches.
- ``static``: a header with opsbot's service secret (from settings). The server sees a
  service identity, never the user's token.
- ``none``: no credential at all (only with an explicit ``auth: none``).
- ``oauth``: the requester's own token for this server from the per-user OAuth connection
  (``oauth_token(identity, server)``, provided by the broker); a user who has not connected
  gets ``ConnectRequiredError`` carrying the URL that connects it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from agent_core.errors import (
    ConnectRequiredError,
    CredentialError,
    CredentialUnavailableError,
)
from broker import (
    AccessToken,
    Broker,
    BrokerError,
    BrokerUnavailableError,
    ConnectRequired,
    Identity,
)

AuthMode = Literal["exchange", "static", "none", "oauth"]
OAuthTokenSource = Callable[[Identity, str], Awaitable[str]]
"""``async def oauth_token(identity, server) -> str`` (``broker.ServerConnector``); raises
``ConnectRequired`` (carrying ``authorize_url``) when the user has not connected ``server``."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where an MCP server lives and how opsbot authenticates to it (from settings)."""

    name: str
    url: str
    audience: str = ""
    auth: AuthMode = "exchange"
    timeout_s: float | None = None  # per call; None: the agent's read/write timeouts
    # Its circuit breaker; None: the agent's (``AgentConfig.breaker_*``).
    breaker_threshold: int | None = None
    breaker_open_seconds: float | None = None
    header_name: str = "Authorization"
    header_value: str | None = field(default=None, repr=False)  # ``static`` only: a secret
    trust_read_only_hint: bool = False

    @property
    def takes_exchanged_token(self) -> bool:
        """Only an ``exchange`` server is sent the user's exchanged token (invariant 15)."""
        return self.auth == "exchange"

    @property
    def acting_as(self) -> Literal["user", "service", "anonymous"]:
        if self.auth == "static":
            return "service"
        if self.auth == "none":
            return "anonymous"
        return "user"


@dataclass(slots=True)
class SessionStats:
    """Counters shared by all runs of one agent (bench and tests read them)."""

    list_tools_calls: int = 0
    sessions_opened: int = 0
    tool_calls: int = 0


class Credentials:
    """The headers one identity's sessions send, per server auth mode."""

    def __init__(
        self, broker: Broker, identity: Identity, oauth_token: OAuthTokenSource | None = None
    ) -> None:
        self._broker = broker
        self._identity = identity
        self._oauth_token = oauth_token

    async def headers(self, config: ServerConfig) -> dict[str, str]:
        server = config.name
        if config.auth == "none":
            return {}
        if config.auth == "static":
            if not config.header_value:
                raise CredentialError(server, f"no static credential is configured for {server}")
            return {config.header_name: config.header_value}
        if config.auth == "oauth":
            return {"Authorization": f"Bearer {await self._oauth(config)}"}
        try:
            token = await self._broker.get_token(self._identity, server)
        except BrokerUnavailableError as exc:
            raise CredentialUnavailableError(server, str(exc)) from exc
        except BrokerError as exc:
            raise CredentialError(server, str(exc)) from exc
        return self.bearer(config, token)

    @staticmethod
    def bearer(config: ServerConfig, token: AccessToken) -> dict[str, str]:
        """The header carrying ``token`` (minted for ``config``'s server) to that server."""
        if token.audience != config.audience:
            # Invariant 1: a user's token goes only to the server it was minted for.
            raise CredentialError(
                config.name, f"the token minted for {config.name} names another audience"
            )
        return {"Authorization": f"Bearer {token.value}"}

    async def _oauth(self, config: ServerConfig) -> str:
        if self._oauth_token is None:
            raise CredentialError(config.name, f"per-user OAuth is not set up for {config.name}")
        try:
            return await self._oauth_token(self._identity, config.name)
        except ConnectRequired as exc:
            raise ConnectRequiredError(config.name, exc.authorize_url) from exc
        except BrokerUnavailableError as exc:
            raise CredentialUnavailableError(config.name, str(exc)) from exc
        except BrokerError as exc:
            raise CredentialError(config.name, str(exc)) from exc

    async def invalidate(self, config: ServerConfig) -> None:
        """Forget the cached user token (after a 401); static and none have nothing to drop."""
        if config.auth != "exchange":
            return
        try:
            await self._broker.invalidate(self._identity, config.name)
        except BrokerError as exc:
            raise CredentialError(config.name, str(exc)) from exc
