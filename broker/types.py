"""Identity and credential types shared by the broker and its callers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ChatUser:
    """A user as a chat platform knows them, e.g. ``ChatUser("slack", "T01", "U42")``."""

    platform: str
    team_id: str
    user_id: str


@dataclass(frozen=True, slots=True)
class Identity:
    """The company identity a request acts for: the IdP subject and the chat user it came from."""

    subject: str
    chat_user: ChatUser | None = None
    email: str = ""
    groups: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class AccessToken:
    """A token minted for one user and one MCP server audience.

    The raw value never appears in ``repr`` or ``str``, so it cannot leak into logs by accident.
    """

    value: str = field(repr=False)
    audience: str
    expires_at: datetime
    scopes: frozenset[str] = field(default_factory=frozenset)

    def __str__(self) -> str:
        return f"AccessToken(audience={self.audience!r}, expires_at={self.expires_at.isoformat()})"


TokensByServer = Mapping[str, AccessToken]
"""One user's tokens keyed by MCP server name (e.g. those minted for one approval decision)."""


class Broker(Protocol):
    """Turns an identity into short-lived, audience-scoped tokens, one per MCP server.

    ``server`` is the configured MCP server name (e.g. ``"ticketing"``).
    """

    async def get_token(self, identity: Identity, server: str) -> AccessToken: ...

    async def invalidate(self, identity: Identity, server: str) -> None: ...


class IdentityService(Broker, Protocol):
    """The broker plus what chat-facing code needs: who a chat user is, linking, unlinking.

    Implemented in-process (``LocalIdentityService``) and over HTTP (``RemoteBroker``).
    """

    async def resolve(self, chat_user: ChatUser, *, fresh: bool = False) -> Identity | None:
        """The linked identity with current groups, or ``None`` when not linked.

        ``fresh`` re-reads the sign-in from the IdP now (an approver's click): a revoked link
        raises ``AccessRevokedError``. Otherwise groups are at most the broker's max age old.
        """
        ...

    async def resolve_subject(self, subject: str) -> Identity:
        """The identity of a linked subject; ``NotLinkedError`` otherwise."""
        ...

    async def link_url(self, chat_user: ChatUser) -> str:
        """A single-use, short-lived login URL linking this chat user."""
        ...

    async def unlink(self, chat_user: ChatUser) -> bool:
        """Delete the link and its refresh token; ``True`` if there was one."""
        ...


class LinkCompleter(Protocol):
    """Finishes an account link from the IdP's redirect to ``/oauth/callback``.

    ``LocalIdentityService`` and ``RemoteBroker`` implement it, so the app can serve the
    callback in both modes. Raises ``InvalidStateError`` or ``LinkingError``.
    """

    async def complete_link(self, state: str, code: str, *, iss: str | None = None) -> Identity: ...


class SsoCompleter(Protocol):
    """Links a chat user from a token their client obtained silently (Teams SSO), when the
    company's IdP issued it. Raises ``TokenVerificationError`` (the token is refused) or
    ``LinkingError`` (the IdP refused the exchange)."""

    async def complete_sso(self, chat_user: ChatUser, token: str) -> Identity: ...


@dataclass(frozen=True, slots=True)
class ServerConnection:
    """A user just connected an MCP server in ``oauth`` mode: who (the IdP subject and the
    chat user who asked) and which server."""

    subject: str
    chat_user: ChatUser
    server: str


class ServerConnector(Protocol):
    """Per-user OAuth to MCP servers in ``oauth`` mode (the MCP authorization spec).

    ``LocalIdentityService`` and ``RemoteBroker`` implement it.
    """

    async def oauth_token(self, identity: Identity, server: str) -> str:
        """The user's current access token for ``server``; ``ConnectRequired`` (carrying the
        URL that connects it) when they have not connected it."""
        ...

    async def complete_server_connect(
        self, state: str, code: str, *, iss: str | None = None
    ) -> ServerConnection:
        """Finish a connection from the redirect to ``/oauth/mcp/callback``. A replayed,
        expired or foreign ``state`` raises ``InvalidStateError``."""
        ...


class IdentityBackend(IdentityService, LinkCompleter, ServerConnector, SsoCompleter, Protocol):
    """All of the above in one object: what the broker service serves over HTTP
    (``broker.service``), which ``LocalIdentityService`` provides."""
