"""The account side of the façade: the chat user's link to their company identity, their
connections to MCP servers, and their saved preferences (user memory).

``Assistant`` (``assistant.service``) inherits these; every other part of the façade resolves
a chat user through ``_identity``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from dataclasses import KW_ONLY, dataclass

from assistant.types import (
    ConnectRefused,
    Linked,
    LinkRequired,
    Refused,
    Remembered,
    ServerConnected,
    ServerConnection,
    UserStatus,
)
from broker.errors import (
    AccessRevokedError,
    BrokerError,
    ConnectRequired,
    InvalidStateError,
    LinkBrokenError,
    LinkingError,
)
from broker.types import (
    ChatUser,
    Identity,
    IdentityService,
    LinkCompleter,
    ServerConnector,
    SsoCompleter,
)
from memory.chat import MemoryCommands, describe

log = logging.getLogger(__name__)

MEMORY_DISABLED = "Memory is not enabled."
ACCESS_REVOKED_TEXT = (
    "Your company account no longer lets opsbot act for you (access revoked or sign-in "
    "expired). Connect again with `/ops link`, or ask your administrator."
)
LINK_BROKEN_TEXT = (
    "Your link to your company account is broken: your company sign-in was refused, so "
    "your company account no longer lets opsbot act for you. Please reconnect with "
    "`/ops link`."
)
UNCHECKED_TEXT = "Your company account could not be checked right now; please try again soon."
STALE_CONNECT_TEXT = (
    "This connect link has expired or was already used. Ask opsbot again for a new one."
)


@dataclass(eq=False, repr=False)
class Accounts:
    """Links, server connections, status and memory of one chat user (``Assistant``'s first
    fields are these)."""

    identities: IdentityService
    _: KW_ONLY
    memory: MemoryCommands | None = None  # user memory (``/ops memory``, App Home); None: off
    links: LinkCompleter | None = None  # finishes account links (/oauth/callback); None: elsewhere
    # Finishes connections to ``auth: oauth`` MCP servers; None: no such server here.
    servers: ServerConnector | None = None
    # The MCP servers reached with the user's exchanged token (App Home's connections).
    exchange_servers: Sequence[str] = ()
    # The MCP servers each user connects with their own sign-in (``auth: oauth``).
    oauth_servers: Sequence[str] = ()
    # Links Teams users from their client's SSO token (the IdP is Entra); None: off.
    sso: SsoCompleter | None = None

    def __post_init__(self) -> None:
        self.exchange_servers = tuple(self.exchange_servers)
        self.oauth_servers = tuple(self.oauth_servers)

    async def link_url(self, chat_user: ChatUser) -> str:
        return await self.identities.link_url(chat_user)

    async def unlink(self, chat_user: ChatUser) -> bool:
        return await self.identities.unlink(chat_user)

    async def complete_link(self, state: str, code: str, *, iss: str | None = None) -> Linked:
        if self.links is None:
            raise LinkingError("account links are not completed by this process")
        identity = await self.links.complete_link(state, code, iss=iss)
        if identity.chat_user is None:  # a link always names its chat account
            raise LinkingError("the completed link names no chat account")
        return Linked(identity.chat_user, identity.email or identity.subject)

    async def link_sso(self, chat_user: ChatUser, token: str) -> Linked | Refused:
        if self.sso is None:
            return Refused("Single sign-on is not enabled here; sign in with the link instead.")
        try:
            identity = await self.sso.complete_sso(chat_user, token)
        except BrokerError as exc:  # a refused token or exchange: one line, never the token
            log.warning("SSO link refused for a %s user: %s", chat_user.platform, exc)
            return Refused("Single sign-on did not work; sign in with the link instead.")
        return Linked(chat_user, identity.email or identity.subject)

    async def complete_server_connect(
        self, state: str, code: str, *, iss: str | None = None
    ) -> ServerConnected | ConnectRefused:
        if self.servers is None:
            return ConnectRefused("No MCP server here uses per-user sign-in.", stale=False)
        try:
            done = await self.servers.complete_server_connect(state, code, iss=iss)
        except InvalidStateError:
            return ConnectRefused(STALE_CONNECT_TEXT, stale=True)
        except BrokerError as exc:
            return ConnectRefused(f"The connection was not completed: {exc}", stale=False)
        return ServerConnected(done.chat_user, done.server)

    async def status(self, chat_user: ChatUser, *, fresh: bool = False) -> UserStatus:
        """What opsbot knows of ``chat_user``; a link the IdP no longer honours (revoked)
        or cannot be checked is a status with a ``problem``, not an error."""
        try:
            identity = await self.identities.resolve(chat_user, fresh=fresh)
        except LinkBrokenError:
            # Recorded when a refresh was refused (a click, a write): reconnect.
            return UserStatus(
                linked=False, login_url=await self.link_url(chat_user), problem=LINK_BROKEN_TEXT
            )
        except AccessRevokedError:
            log.info("status: the IdP no longer honours the link of %s", chat_user.user_id)
            return UserStatus(
                linked=False, login_url=await self.link_url(chat_user), problem=ACCESS_REVOKED_TEXT
            )
        except BrokerError as exc:
            log.warning("status: the link of %s could not be checked: %s", chat_user.user_id, exc)
            return UserStatus(linked=False, problem=UNCHECKED_TEXT)
        if identity is None:
            return UserStatus(linked=False, login_url=await self.link_url(chat_user))
        return UserStatus(True, identity.subject, identity.email or None, identity.groups)

    async def connections(self, chat_user: ChatUser) -> list[ServerConnection]:
        identity = await self.identities.resolve(chat_user)
        if identity is None:
            return []
        shown = [
            await _connection(
                server,
                self.identities.get_token(identity, server),
                AccessRevokedError,
                "access revoked: connect again",
            )
            for server in self.exchange_servers
        ]
        connector = self.servers
        if connector is not None:
            shown += [
                await _connection(
                    server,
                    connector.oauth_token(identity, server),
                    ConnectRequired,
                    "not connected: ask opsbot to use it",
                )
                for server in self.oauth_servers
            ]
        return shown

    # --- user memory ------------------------------------------------------------------

    async def memory_command(self, chat_user: ChatUser, text: str) -> str:
        if self.memory is None:
            return MEMORY_DISABLED
        return await self.memory.handle(chat_user, text)

    async def remembered(self, chat_user: ChatUser) -> Remembered | None:
        if self.memory is None:
            return None
        prefs = await self.memory.preferences(chat_user)
        return None if prefs is None else Remembered(describe(prefs), prefs.is_empty())

    async def forget_memory(self, chat_user: ChatUser) -> bool:
        return self.memory is not None and await self.memory.forget_all(chat_user)

    # --- helpers --------------------------------------------------------------------

    async def _identity(
        self, chat_user: ChatUser, *, fresh: bool = False
    ) -> Identity | LinkRequired | Refused:
        try:
            identity = await self.identities.resolve(chat_user, fresh=fresh)
            if identity is None:
                return LinkRequired(await self.identities.link_url(chat_user))
        except AccessRevokedError:
            # The IdP no longer honours this sign-in: nothing is decided; reconnect.
            log.info("sign-in refused by the IdP for a %s user", chat_user.platform)
            try:
                return LinkRequired(await self.identities.link_url(chat_user))
            except BrokerError:
                return Refused("Your company sign-in is no longer valid: connect again.")
        except BrokerError as exc:
            return Refused(f"Your company account could not be checked: {exc}")
        return identity


async def _connection(
    server: str, token: Awaitable[object], missing: type[BrokerError], problem: str
) -> ServerConnection:
    """Whether ``token`` (the user's token for ``server``) could be had: ``missing`` is the
    user's own gap (said as ``problem``), any other broker error a failure right now."""
    try:
        await token
    except missing:
        return ServerConnection(server, False, problem)
    except BrokerError as exc:
        log.info("connections: no token for %s: %s", server, type(exc).__name__)
        return ServerConnection(server, False, "not reachable as you right now")
    return ServerConnection(server, True)
