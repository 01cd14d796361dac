"""The per-user half of the ``oauth`` auth mode (the MCP authorization spec).

For each MCP server in ``oauth`` mode, each user connects once: ``authorize_url(identity,
server)`` is the server's authorization server login (code + PKCE + RFC 8707 ``resource``),
``complete(state, code, iss)`` (from the ``/oauth/mcp/callback`` route) stores that user's
tokens for that server, encrypted (Fernet, a key derived from the link key), and
``oauth_token(identity, server)`` gives a current access token, refreshing it when due, or
raises ``ConnectRequired`` with the URL to connect. ``disconnect(subject)`` revokes and forgets
every server's tokens (on unlink).

A connection is started from chat, like an account link, and its ``state`` is handled by
the same code (``broker.login_state``): a Fernet token (encrypted, signed, expiring) naming a
pending login stored with the PKCE verifier in the link store's ``link_logins`` (so any
instance can finish it). Finishing
takes that row, so a state works once; it must still belong to the chat user who asked, linked
to the same company account. Tokens live in a ``McpTokenStore`` (``broker.mcp_tokens``: in
memory, or the ``mcp_oauth_tokens`` table).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from cryptography.fernet import Fernet

from broker.errors import ConnectRequired, InvalidStateError, LinkingError, NotLinkedError
from broker.exchange import post_token_form
from broker.login_state import NONCE, LoginFlow
from broker.mcp_oauth import (
    AuthorizationServer,
    RegisteredClient,
    discover,
    register,
)
from broker.mcp_tokens import McpTokenStore, MemoryMcpTokenStore
from broker.types import ChatUser, Identity, ServerConnection
from infra.settings import McpOAuthClient

__all__ = ["McpOAuthService", "McpTokenStore", "MemoryMcpTokenStore", "OAuthServer"]


@dataclass(frozen=True, slots=True)
class OAuthServer:
    """An MCP server in ``oauth`` mode: its name, URL and optional hand-registered client."""

    name: str
    url: str
    client: McpOAuthClient | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    expires_at: datetime


class McpOAuthService:
    """Per-user OAuth to MCP servers (see the module doc)."""

    def __init__(
        self,
        servers: Mapping[str, OAuthServer],
        *,
        flow: LoginFlow,
        store: McpTokenStore,
        http: httpx.AsyncClient,
        redirect_uri: str,
        refresh_margin: timedelta = timedelta(seconds=30),
    ) -> None:
        self._servers = dict(servers)
        self._store = store
        self._logins = flow.links  # pending connections (single use) and who is linked
        self._seal = Fernet(flow.cipher.derive(b"opsbot mcp oauth tokens v1"))
        self._states = flow.states(b"opsbot mcp oauth state v1", "connect link")
        self._http = http
        self.redirect_uri = redirect_uri
        self._clock = flow.clock
        self._margin = refresh_margin
        self._setup: dict[str, tuple[AuthorizationServer, RegisteredClient]] = {}
        self._lock = asyncio.Lock()

    async def _server(self, name: str) -> tuple[AuthorizationServer, RegisteredClient]:
        """Discovery and registration, once per server."""
        if name not in self._servers:
            raise LinkingError(f"no MCP server {name!r} is configured for oauth")
        async with self._lock:
            if name not in self._setup:
                server = self._servers[name]
                found = await discover(server.url, self._http)
                client = await register(
                    found, self.redirect_uri, self._http, configured=server.client
                )
                self._setup[name] = (found, client)
        return self._setup[name]

    def _scopes(self, name: str, found: AuthorizationServer) -> str:
        client = self._servers[name].client
        return " ".join(client.scopes if client and client.scopes else found.scopes_supported)

    async def authorize_url(self, identity: Identity, server: str) -> str:
        """Where ``identity`` connects their account to ``server`` (one use, for ``flow.ttl``)."""
        found, client = await self._server(server)
        chat_user = await self._asker(identity)
        started = await self._states.start(chat_user, {"s": identity.subject, "m": server})
        query = {
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": self.redirect_uri,
            "state": started.state,
            "code_challenge": started.code_challenge,
            "code_challenge_method": "S256",
            "resource": found.resource,
            "prompt": "consent",  # so offline_access yields a refresh token everywhere
        }
        scope = self._scopes(server, found)
        if scope:
            query["scope"] = scope
        return f"{found.authorization_endpoint}?{urlencode(query)}"

    async def _asker(self, identity: Identity) -> ChatUser:
        """The chat user a connection is bound to: the one asking (who must be linked to
        this subject), else the subject's first link."""
        if identity.chat_user is not None:
            link = await self._logins.get(identity.chat_user)
            if link is not None and link.subject == identity.subject:
                return identity.chat_user
        else:
            links = await self._logins.links_for_subject(identity.subject)
            if links:
                return links[0].chat_user
        raise NotLinkedError(f"{identity.subject!r} has not connected their account")

    async def complete(self, state: str, code: str, iss: str | None = None) -> ServerConnection:
        """Finish a connection: the state must be ours, fresh, unused, and still name the
        chat user's current link. Stores the grant; who connected which server."""
        data = self._states.read(state)
        subject, server = data["s"], data["m"]
        pending = await self._states.take(data[NONCE])
        link = await self._logins.get(pending.chat_user)
        if link is None or link.subject != subject:
            # Unlinked or relinked to another company account since: not theirs to finish.
            raise InvalidStateError("the connect link belongs to an account that is not linked")
        found, client = await self._server(server)
        if iss is not None and iss.rstrip("/") != found.issuer:
            raise LinkingError("the response came from another authorization server")
        body = await self._token_request(
            found,
            client,
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": self.redirect_uri,
                "code_verifier": pending.code_verifier,
                "resource": found.resource,
            },
        )
        await self._save(subject, server, body, previous_refresh=None)
        return ServerConnection(subject, pending.chat_user, server)

    async def oauth_token(self, identity: Identity, server: str) -> str:
        """A current access token of ``identity`` for ``server``; ``ConnectRequired`` if none."""
        subject = identity.subject
        sealed = await self._store.get(subject, server)
        if sealed is None:
            raise ConnectRequired(server, await self.authorize_url(identity, server))
        grant = self._open(sealed)
        if grant.expires_at - self._margin > self._clock():
            return grant.access_token
        found, client = await self._server(server)
        if grant.refresh_token is None:
            await self._store.delete(subject, server)
            raise ConnectRequired(server, await self.authorize_url(identity, server))
        try:
            body = await self._token_request(
                found,
                client,
                {
                    "grant_type": "refresh_token",
                    "refresh_token": grant.refresh_token,
                    "resource": found.resource,
                },
            )
        except LinkingError:  # refused: the user must connect again
            await self._store.delete(subject, server)
            raise ConnectRequired(server, await self.authorize_url(identity, server)) from None
        return (await self._save(subject, server, body, grant.refresh_token)).access_token

    async def disconnect(self, subject: str) -> None:
        """Revoke (best effort) and forget every server's tokens of ``subject``."""
        for server in await self._store.servers(subject):
            sealed = await self._store.get(subject, server)
            await self._store.delete(subject, server)
            if sealed is None:
                continue
            grant = self._open(sealed)
            found, client = await self._server(server)
            if found.revocation_endpoint and grant.refresh_token:
                form, headers = _client_auth(client, {"token": grant.refresh_token})
                with contextlib.suppress(httpx.HTTPError):  # the local copy is gone anyway
                    await self._http.post(found.revocation_endpoint, data=form, headers=headers)

    async def _save(
        self, subject: str, server: str, body: dict[str, Any], previous_refresh: str | None
    ) -> Grant:
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise LinkingError("the authorization server sent no access token")
        expires_in = body.get("expires_in")
        lifetime = int(expires_in) if isinstance(expires_in, int | float) else 300
        refresh = body.get("refresh_token")
        grant = Grant(
            token,
            refresh if isinstance(refresh, str) and refresh else previous_refresh,
            self._clock() + timedelta(seconds=lifetime),
        )
        payload = {
            "a": grant.access_token,
            "r": grant.refresh_token,
            "e": grant.expires_at.timestamp(),
        }
        await self._store.put(
            subject, server, self._seal.encrypt(json.dumps(payload).encode()).decode("ascii")
        )
        return grant

    def _open(self, sealed: str) -> Grant:
        data = json.loads(self._seal.decrypt(sealed.encode("ascii")))
        return Grant(str(data["a"]), data["r"], datetime.fromtimestamp(float(data["e"]), UTC))

    async def _token_request(
        self, found: AuthorizationServer, client: RegisteredClient, form: dict[str, str]
    ) -> dict[str, Any]:
        data, headers = _client_auth(client, form)
        status, body = await post_token_form(
            self._http, found.token_endpoint, data, headers, "authorization server"
        )
        if status != 200 or not isinstance(body, dict) or "error" in body:
            error = body.get("error") if isinstance(body, dict) else status
            raise LinkingError(f"the authorization server refused: {error}")
        return body


def _client_auth(
    client: RegisteredClient, form: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    if client.client_secret is None or client.auth_method == "none":
        return {**form, "client_id": client.client_id}, {}
    if client.auth_method == "client_secret_post":
        return {**form, "client_id": client.client_id, "client_secret": client.client_secret}, {}
    pair = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"
    return form, {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}
