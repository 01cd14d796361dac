"""Reference MCP servers (ticketing, docs, database) that verify tokens and authorise per user.

Each server checks every bearer token itself (signature via the IdP's JWKS, issuer, exact
audience, expiry, per-tool scopes) and decides what the token's user may see and change.
Errors: see ``mcp_servers.errors``.
"""

from mcp_servers.app import AuthConfig, ScopedServer
from mcp_servers.auth import Caller, JwksClient, JwtVerifier
from mcp_servers.database import DatabaseConfig
from mcp_servers.errors import (
    ConfigError,
    ForbiddenError,
    IdempotencyConflictError,
    JwksUnavailableError,
    McpServerError,
    NotFoundError,
    TokenRejectedError,
    ToolRefusedError,
)
from mcp_servers.runner import (
    ReferenceServers,
    RunningServer,
    serve_server,
    start_reference_servers,
)

__all__ = [
    "AuthConfig",
    "Caller",
    "ConfigError",
    "DatabaseConfig",
    "ForbiddenError",
    "IdempotencyConflictError",
    "JwksClient",
    "JwksUnavailableError",
    "JwtVerifier",
    "McpServerError",
    "NotFoundError",
    "ReferenceServers",
    "RunningServer",
    "ScopedServer",
    "TokenRejectedError",
    "ToolRefusedError",
    "serve_server",
    "start_reference_servers",
]
