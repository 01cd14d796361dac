"""The first half of the ``oauth`` auth mode for MCP servers (the MCP authorization spec):
finding a server's authorization server and registering opsbot with it.

``discover(server_url, http)`` reads the server's RFC 9728 protected-resource metadata (the
``resource_metadata`` URL of its 401 challenge if given, else the path-inserted and then the
root well-known URL), then its authorization server's metadata (RFC 8414, then OpenID
discovery), and checks that each names itself as asked (``resource``, ``issuer``) and that the
authorization server does PKCE with S256. ``register(server, redirect_uri, http)`` uses RFC
7591 dynamic client registration unless an ``McpOAuthClient`` (``infra.settings``) is
configured.

The per-user flow (``oauth_token(identity, server)``, raising ``ConnectRequired``) is in
``broker.mcp_oauth_flow``; its callback route is ``broker.web.mcp_oauth_routes``.

Example::

    found = await discover("https://mcp.vendor.example/mcp", http)
    client = await register(found, "https://opsbot.internal/oauth/mcp/callback", http)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from broker.errors import BrokerError, BrokerUnavailableError, ConnectRequired
from broker.http import request
from infra.json_input import parse_json
from infra.settings import McpOAuthClient

__all__ = [
    "AuthorizationServer",
    "ConnectRequired",
    "OAuthDiscoveryError",
    "RegisteredClient",
    "discover",
    "register",
]


class OAuthDiscoveryError(BrokerError):
    """The server's metadata is missing, malformed, or names another resource or issuer."""


@dataclass(frozen=True, slots=True)
class AuthorizationServer:
    """What an MCP server's authorization server offers (RFC 8414 metadata)."""

    resource: str
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None = None
    revocation_endpoint: str | None = None
    scopes_supported: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RegisteredClient:
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    auth_method: str = "none"  # none | client_secret_basic | client_secret_post


def _well_known(url: str, name: str) -> list[str]:
    """RFC 8615/9728/8414: the path-inserted well-known URL, then the root one."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    inserted = urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{name}{path}", "", ""))
    root = urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{name}", "", ""))
    return [inserted, root] if path else [root]


async def _json(http: httpx.AsyncClient, url: str) -> dict[str, Any] | None:
    """The JSON object at ``url``; ``None`` for a 4xx (try the next URL)."""
    response = await request(http, "GET", url, url, headers={"Accept": "application/json"})
    if 400 <= response.status_code < 500:
        return None
    if response.status_code != 200:
        raise BrokerUnavailableError(f"{url} answered {response.status_code}")
    try:
        data = parse_json(response.content)
    except ValueError:
        raise OAuthDiscoveryError(f"{url} sent no JSON") from None
    if not isinstance(data, dict):
        raise OAuthDiscoveryError(f"{url} sent no JSON object")
    return data


async def discover(
    server_url: str, http: httpx.AsyncClient, *, resource_metadata: str | None = None
) -> AuthorizationServer:
    """The authorization server of the MCP server at ``server_url`` (see the module doc)."""
    urls = (
        [resource_metadata]
        if resource_metadata
        else _well_known(server_url, "oauth-protected-resource")
    )
    resource_doc = None
    for url in urls:
        resource_doc = await _json(http, url)
        if resource_doc is not None:
            break
    if resource_doc is None:
        raise OAuthDiscoveryError(f"{server_url} publishes no protected-resource metadata")
    resource = resource_doc.get("resource")
    if not isinstance(resource, str) or resource.rstrip("/") != server_url.rstrip("/"):
        raise OAuthDiscoveryError(
            f"the protected-resource metadata names {resource!r}, not {server_url!r}"
        )
    issuers = resource_doc.get("authorization_servers")
    if not isinstance(issuers, list) or not issuers or not isinstance(issuers[0], str):
        raise OAuthDiscoveryError(f"{server_url} names no authorization server")
    issuer = _web_url(issuers[0], "its authorization server").rstrip("/")
    meta = None
    for url in [
        *_well_known(issuer, "oauth-authorization-server")[:1],
        f"{issuer}/.well-known/openid-configuration",
        *_well_known(issuer, "openid-configuration")[:1],
    ]:
        meta = await _json(http, url)
        if meta is not None:
            break
    if meta is None:
        raise OAuthDiscoveryError(f"the authorization server {issuer} publishes no metadata")
    if str(meta.get("issuer", "")).rstrip("/") != issuer:
        raise OAuthDiscoveryError("the authorization server metadata names another issuer")
    if "S256" not in (meta.get("code_challenge_methods_supported") or []):
        raise OAuthDiscoveryError(f"{issuer} does not support PKCE with S256")
    authorize, token = meta.get("authorization_endpoint"), meta.get("token_endpoint")
    if not isinstance(authorize, str) or not isinstance(token, str):
        raise OAuthDiscoveryError(f"{issuer} lacks an authorization or token endpoint")
    scopes = resource_doc.get("scopes_supported") or meta.get("scopes_supported") or []
    return AuthorizationServer(
        resource=resource,
        issuer=issuer,
        # The first is a link people click (a button in chat), the others opsbot calls.
        authorization_endpoint=_web_url(authorize, f"{issuer}'s authorization endpoint"),
        token_endpoint=_web_url(token, f"{issuer}'s token endpoint"),
        registration_endpoint=_opt(meta, "registration_endpoint"),
        revocation_endpoint=_opt(meta, "revocation_endpoint"),
        scopes_supported=tuple(s for s in scopes if isinstance(s, str))
        if isinstance(scopes, list)
        else (),
    )


async def register(
    server: AuthorizationServer,
    redirect_uri: str,
    http: httpx.AsyncClient,
    *,
    configured: McpOAuthClient | None = None,
    client_name: str = "opsbot",
) -> RegisteredClient:
    """The configured client, else one registered now (RFC 7591, as a confidential client)."""
    if configured is not None:
        secret = configured.client_secret
        return RegisteredClient(
            configured.client_id,
            secret.get_secret_value() if secret else None,
            "client_secret_basic" if secret else "none",
        )
    if server.registration_endpoint is None:
        raise OAuthDiscoveryError(
            f"{server.issuer} has no dynamic client registration: configure a client for it"
        )
    body = {
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic",
    }
    response = await request(
        http, "POST", server.registration_endpoint, server.issuer, "registration", json=body
    )
    try:
        data = parse_json(response.content)
    except ValueError:
        data = None
    if response.status_code != 201 or not isinstance(data, dict):
        error = data.get("error") if isinstance(data, dict) else response.status_code
        raise OAuthDiscoveryError(f"{server.issuer} refused the client registration: {error}")
    client_id = data.get("client_id")
    if not isinstance(client_id, str) or not client_id:
        raise OAuthDiscoveryError(f"{server.issuer} registered a client without a client_id")
    secret = data.get("client_secret")
    method = data.get("token_endpoint_auth_method", "client_secret_basic")
    return RegisteredClient(client_id, secret if isinstance(secret, str) else None, str(method))


def _opt(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    return _web_url(value, name) if isinstance(value, str) and value else None


def _web_url(value: str, what: str) -> str:
    """``value`` if it is an http(s) URL with a host: discovered metadata must not make
    opsbot call, or show people, a ``javascript:``, ``file:`` or ``data:`` URL."""
    try:
        parts = urlsplit(value)
        usable = parts.scheme in ("https", "http") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        usable = False
    if not usable:
        raise OAuthDiscoveryError(f"{what} is not an http(s) URL: {value[:80]!r}")
    return value
