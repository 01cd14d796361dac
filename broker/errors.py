"""Errors raised by the broker.

Exception tree::

    BrokerError
    ├── NotLinkedError          the chat user has no account link
    ├── AccessRevokedError      the IdP refused: the user's access was revoked
    ├── ExchangeFailedError     token exchange for one server failed (names the server)
    ├── BrokerUnavailableError  the IdP or the broker service could not be reached
    ├── TokenVerificationError  a token failed validation (issuer, audience, expiry, signature)
    ├── LinkingError            an account-linking login was refused
    │   └── InvalidStateError   the login ``state`` was tampered with, replayed, expired or
    │                           belongs to another chat user
    └── ConnectRequired         an ``auth: oauth`` MCP server the user has not connected yet

Messages name the missing access; they never contain a token.
"""

from __future__ import annotations


class BrokerError(Exception):
    """Base class for every broker failure."""


class NotLinkedError(BrokerError):
    """The chat user has not connected their company account."""


class AccessRevokedError(BrokerError):
    """The identity provider no longer issues tokens for this user."""


class ExchangeFailedError(BrokerError):
    """Token exchange for one MCP server failed."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"token exchange for server {server!r} failed: {reason}")
        self.server = server
        self.reason = reason


class BrokerUnavailableError(BrokerError):
    """The identity provider or the broker service could not be reached."""


class TokenVerificationError(BrokerError):
    """A token failed validation: bad signature, issuer, audience, expiry or claims."""


class LinkingError(BrokerError):
    """Linking a chat user to their company account failed."""


class InvalidStateError(LinkingError):
    """The login ``state`` is not one we issued, was used already, or has expired."""


class ConnectRequired(BrokerError):
    """The user has not connected ``server`` (an MCP server in ``oauth`` mode) yet: send them
    to ``authorize_url``."""

    def __init__(self, server: str, authorize_url: str) -> None:
        super().__init__(f"connect your account to {server} first")
        self.server = server
        self.authorize_url = authorize_url
