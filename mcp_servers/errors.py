"""Errors raised by the reference MCP servers.

Exception tree::

    McpServerError
    ├── TokenRejectedError       a bearer token failed verification (reason says why; 401)
    ├── JwksUnavailableError     the IdP's signing keys could not be fetched (503)
    ├── ConfigError              a server was configured inconsistently
    └── ToolRefusedError         a tool call was refused; the message is shown to the caller
        ├── NotFoundError        no such object that this caller can see
        ├── ForbiddenError       the caller may see the object but not do this to it
        └── IdempotencyConflictError  an idempotency key was reused with different arguments

Messages never contain a token.
"""

from __future__ import annotations


class McpServerError(Exception):
    """Base class for every error of the reference MCP servers."""


class TokenRejectedError(McpServerError):
    """The bearer token is not acceptable: bad signature, wrong issuer or audience, expired."""


class JwksUnavailableError(McpServerError):
    """The identity provider's JWKS could not be fetched, so no token can be checked."""


class ConfigError(McpServerError):
    """A server's configuration is inconsistent."""


class ToolRefusedError(McpServerError):
    """A tool call was refused; the message is meant for the caller (and the model)."""


class NotFoundError(ToolRefusedError):
    """No object by that key that this caller can see (other teams' objects look absent)."""


class ForbiddenError(ToolRefusedError):
    """The caller can see the object but may not perform this action on it."""


class IdempotencyConflictError(ToolRefusedError):
    """An idempotency key was reused with different arguments or for a different tool."""
