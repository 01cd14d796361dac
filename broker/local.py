"""``LocalIdentityService``: the in-process broker and linking behind ``IdentityService``."""

from __future__ import annotations

from dataclasses import dataclass

from broker.errors import LinkingError
from broker.inprocess import InProcessBroker
from broker.linking import LinkingService
from broker.mcp_oauth_flow import McpOAuthService
from broker.sso import SsoLinker
from broker.types import AccessToken, ChatUser, Identity, ServerConnection


@dataclass(eq=False)
class LocalIdentityService:
    """Tokens, identities and links, all in this process (the embedded default)."""

    broker: InProcessBroker
    linking: LinkingService
    mcp_oauth: McpOAuthService | None = None  # servers in `oauth` mode: their tokens go on unlink
    sso: SsoLinker | None = None  # Teams SSO (the IdP is Entra); None: links only through a login

    async def oauth_token(self, identity: Identity, server: str) -> str:
        """The user's token for ``server`` in ``oauth`` mode; ``ConnectRequired`` if none."""
        if self.mcp_oauth is None:
            raise LinkingError(f"{server} is not configured for per-user OAuth")
        return await self.mcp_oauth.oauth_token(identity, server)

    async def complete_server_connect(
        self, state: str, code: str, *, iss: str | None = None
    ) -> ServerConnection:
        """Finish connecting an ``oauth`` MCP server (``/oauth/mcp/callback``)."""
        if self.mcp_oauth is None:
            raise LinkingError("no MCP server is configured for per-user OAuth")
        return await self.mcp_oauth.complete(state, code, iss)

    async def get_token(self, identity: Identity, server: str) -> AccessToken:
        return await self.broker.get_token(identity, server)

    async def invalidate(self, identity: Identity, server: str) -> None:
        await self.broker.invalidate(identity, server)

    async def resolve(self, chat_user: ChatUser, *, fresh: bool = False) -> Identity | None:
        return await self.broker.resolve(chat_user, fresh=fresh)

    async def resolve_subject(self, subject: str) -> Identity:
        return await self.broker.resolve_subject(subject)

    async def link_url(self, chat_user: ChatUser) -> str:
        return await self.linking.start(chat_user)

    async def complete_link(self, state: str, code: str, *, iss: str | None = None) -> Identity:
        """Finish a link from the IdP's redirect; the newly linked identity."""
        result = await self.linking.complete(state, code, iss=iss)
        link = result.link
        await self.broker.invalidate_user(link.subject)  # a new sign-in: drop stale tokens
        return Identity(link.subject, link.chat_user, link.email, result.groups)

    async def complete_sso(self, chat_user: ChatUser, token: str) -> Identity:
        """Link a Teams user from their client's SSO token (``broker.sso``)."""
        if self.sso is None:
            raise LinkingError("Teams SSO is not enabled")
        result = await self.sso.link(chat_user, token)
        link = result.link
        await self.broker.invalidate_user(link.subject)  # a new sign-in: drop stale tokens
        return Identity(link.subject, link.chat_user, link.email, result.groups)

    async def unlink(self, chat_user: ChatUser) -> bool:
        link = await self.linking.links.get(chat_user)
        removed = await self.linking.unlink(chat_user)
        if link is not None:
            await self.broker.invalidate_user(link.subject)
            if self.mcp_oauth is not None:  # revoke what the user connected, too
                await self.mcp_oauth.disconnect(link.subject)
        return removed
