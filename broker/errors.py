"""Errors raised by the broker.

Exception tree::

    BrokerError
    ├── NotLinkedError          the chat user has no account link
    ├── AccessRevokedError      the IdP refused: the user's access was revoked
    │   └── LinkBrokenError     refused before, recorded on the link: reconnect first
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


class LinkBrokenError(AccessRevokedError):
    """The link's refresh was refused before (recorded on the link): reconnect first."""


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


# The broker service's wire form of each error (``broker.service`` answers with it,
# ``broker.remote`` raises it again): code and HTTP status, most specific class first.
_WIRE: tuple[tuple[type[BrokerError], str, int], ...] = (
    (ConnectRequired, "connect_required", 409),
    (InvalidStateError, "invalid_state", 400),
    (TokenVerificationError, "token_invalid", 401),
    (LinkingError, "linking_failed", 502),
    (NotLinkedError, "not_linked", 404),
    # Before its parent AccessRevokedError: the first match wins.
    (LinkBrokenError, "link_broken", 403),
    (AccessRevokedError, "access_revoked", 403),
    (ExchangeFailedError, "exchange_failed", 502),
    (BrokerUnavailableError, "unavailable", 503),
)


def to_wire(exc: BrokerError) -> tuple[dict[str, str], int]:
    """The JSON body and HTTP status the broker service answers ``exc`` with."""
    body = {"error": "broker_error", "message": str(exc)}
    status = 500
    for cls, code, code_status in _WIRE:
        if isinstance(exc, cls):
            body, status = {"error": code, "message": str(exc)}, code_status
            break
    if isinstance(exc, ExchangeFailedError):
        body.update(server=exc.server, message=exc.reason)
    if isinstance(exc, ConnectRequired):
        body.update(server=exc.server, authorize_url=exc.authorize_url)
    return body, status


def from_wire(data: dict[str, object], status: int, server: str) -> BrokerError:
    """The error a broker service answer stands for (``to_wire`` read back); ``server`` is
    the one the request named, for answers that do not say."""
    code, message = str(data.get("error")), str(data.get("message", ""))
    named = str(data.get("server") or server)
    if code == "exchange_failed":
        return ExchangeFailedError(named, message)
    url = data.get("authorize_url")
    if code == "connect_required" and isinstance(url, str) and url:
        return ConnectRequired(named, url)
    if code == "unauthorized":
        return BrokerError("the broker service refused opsbot's service credentials")
    for cls, wire_code, _ in _WIRE:
        if code == wire_code and cls not in (ExchangeFailedError, ConnectRequired):
            return cls(message)
    if status >= 500:
        return BrokerUnavailableError(message or f"broker service error {status}")
    return BrokerError(f"broker service refused the request: {code}: {message}")
