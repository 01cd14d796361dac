"""Errors raised by the agent core.

Exception tree::

    AgentError
    ├── PolicyError              the tool policy file is invalid (bad YAML, unknown field, ...)
    ├── ToolCollisionError       two tools share a name after server prefixing (stops start-up)
    ├── NoPendingApprovalError   ``resume`` on a thread that is not waiting for a decision
    ├── InvalidDecisionError     a decision does not fit the pending actions (count, type, edit)
    ├── ModelUnavailableError    the model (and every fallback) failed; nothing more ran
    └── ToolCallError            one tool call failed; mapped to an error ToolMessage, never raised
        ├── ToolAuthError        the server refused the user's token (401) or scope (403)
        ├── ToolTimeoutError     no answer in time (for a write: outcome unknown)
        ├── ToolTransientError   5xx, 429, connection failure: worth a retry for idempotent reads
        │   └── SessionEndedError  404: the server no longer knows the session (took nothing)
        ├── ToolResultError      the tool (or the server) reported an error; the server's text
        ├── ToolProtocolError    the reply broke MCP (unreadable, malformed, off its schema)
        ├── ServerUnavailableError  the server is down or its circuit breaker is open
        ├── CredentialError      the broker could not mint a token for this user and server
        ├── CredentialUnavailableError  the broker/IdP is unreachable right now (transient)
        └── ConnectRequiredError  an ``auth: oauth`` server: the user has not connected it yet

Thread ownership failures are ``agent_core.threads.NotThreadOwnerError``. Messages never
contain a token.
"""

from __future__ import annotations


def not_responding_text(server: str) -> str:
    """What a person reads when a server's breaker is open or it stopped answering."""
    return f"{server} is not responding"


class AgentError(Exception):
    """Base class for agent-core errors."""


class PolicyError(AgentError):
    """The tool policy could not be loaded."""


class ModelConfigError(AgentError):
    """A configured model cannot be built (unknown provider, its package or key missing)."""

    def __init__(self, spec: str, reason: str) -> None:
        super().__init__(f"cannot use model {spec!r}: {reason}")
        self.spec = spec
        self.reason = reason


class ToolCollisionError(AgentError):
    """Two tools have one name after prefixing; opsbot refuses to start."""


class NoPendingApprovalError(AgentError):
    """The thread has no interrupt waiting for decisions."""


class InvalidDecisionError(AgentError):
    """A decision does not match the pending action requests.

    ``field_errors`` maps an argument name (or ``"name"``/``"decisions"``) to a message.
    """

    def __init__(self, message: str, field_errors: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.field_errors = dict(field_errors or {})


class ModelUnavailableError(AgentError):
    """Every configured model failed for this run. The thread is kept; the user may retry."""


class ToolCallError(AgentError):
    """A tool call failed in a way the error mapper turns into a message for the model."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(message)
        self.server = server


class ToolAuthError(ToolCallError):
    """The server answered 401 (token refused) or 403 (missing scope)."""

    def __init__(self, server: str, status: int, message: str = "") -> None:
        super().__init__(server, message or f"{server} refused the request (HTTP {status})")
        self.status = status


class ToolTimeoutError(ToolCallError):
    """The server did not answer in time."""


class ToolTransientError(ToolCallError):
    """A failure that may pass: 5xx, 429, connection errors."""


class SessionEndedError(ToolTransientError):
    """The server answered 404: it no longer knows the session, so it did not take the call."""


class ServerUnavailableError(ToolCallError):
    """The server is down or its circuit breaker is open."""


class CredentialError(ToolCallError):
    """The broker could not mint a token for this user and server (revoked, not linked, ...)."""


class ToolResultError(ToolCallError):
    """The tool ran and reported an error (bad arguments, unknown key, ...): the server's text."""


class ToolProtocolError(ToolCallError):
    """The server's reply could not be used: not MCP, a malformed result, or a result off the
    tool's output schema. Not retried; for a write, whether it was applied is not known."""


class CredentialUnavailableError(ToolCallError):
    """The broker or identity provider is unreachable: nothing was sent; retry later."""


class ConnectRequiredError(CredentialError):
    """An ``auth: oauth`` server the user has not connected yet; ``authorize_url`` connects it."""

    def __init__(self, server: str, authorize_url: str = "") -> None:
        super().__init__(server, f"connect your {server} account first")
        self.authorize_url = authorize_url
