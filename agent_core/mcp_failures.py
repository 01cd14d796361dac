"""What an MCP client failure means, and what the MCP SDK may log of it.

``classify_failure`` maps what a call or a session open raised (the SDK's errors, httpx's,
the HTTP statuses seen) to the ``ToolCallError`` tree; ``reply_failure`` reads the error
answer ``agent_core.transport`` gives a request: the server's own error, a reply that is not
MCP, a session the server ended. Importing this module also quiets the SDK's per-session INFO
lines and the tracebacks it logs for replies the transport answers instead (one line is
logged per failure, by the guard in ``agent_core.sessions``).
"""

from __future__ import annotations

import logging

import httpx
from mcp import McpError
from mcp.types import ErrorData

from agent_core.errors import (
    SessionEndedError,
    ToolAuthError,
    ToolCallError,
    ToolProtocolError,
    ToolResultError,
    ToolTimeoutError,
    ToolTransientError,
)
from agent_core.transport import ServerError, SessionEnded, UnreadableReply
from infra.characters import CONTROL_C0_C1
from infra.logging import demote_to_debug, quiet_mcp_streams

__all__ = [
    "SERVER_TEXT_CHARS",
    "classify_failure",
    "one_line",
    "quiet_mcp_client",
    "reply_failure",
]

MCP_CLIENT_LOGGER = "mcp.client.streamable_http"


def quiet_mcp_client() -> None:
    """The MCP client says at INFO what it does for every session (its id, the protocol
    version, stream reconnects); opsbot opens one per server per run, so at INFO that is a
    few lines per tool call. They are DEBUG lines here; warnings and errors are untouched."""
    demote_to_debug(MCP_CLIENT_LOGGER, "per-session", lambda r: r.levelno == logging.INFO)


quiet_mcp_client()
# A reply it cannot parse, the SDK logs as an error with a traceback (and the server's text);
# the transport answers the request instead, and the guard logs one line (see below).
demote_to_debug(
    MCP_CLIENT_LOGGER,
    "unreadable reply",
    lambda r: r.getMessage().startswith(
        (
            "Error parsing JSON response",
            "Error parsing SSE message",
            "Unexpected content type",
            # Two lines of the server's raw initialize result (the session then fails).
            "Failed to parse initialization response",
            "Raw result:",
        )
    ),
)
# A session's close (DELETE) answered 404: the server no longer had it, which is what the
# close was for (it ends sessions itself, or forgot this one), not a warning per run.
demote_to_debug(
    MCP_CLIENT_LOGGER,
    "session already gone",
    lambda r: r.getMessage() == "Session termination failed: 404",
)
# What of a server's own error text a person or the model is shown, at the most.
SERVER_TEXT_CHARS = 300

# Every session's end makes the SDK log a closed SSE stream as an error with a traceback:
# noise in every process that opens sessions (the bot, bench, tests), and costly to format.
quiet_mcp_streams()


def _root_causes(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(_root_causes(inner))
        return out
    return [exc]


def one_line(text: str, limit: int = SERVER_TEXT_CHARS) -> str:
    """A server's own text as a person (and, for a JSON-RPC error, the model) is shown it: on
    one line, at most ``limit`` characters (a server may send a whole stack trace), without
    control characters (a terminal escape is not for a chat; a NUL cannot be stored in
    PostgreSQL's text, where an approval keeps its outcome's reason)."""
    # (The whitespace among the control characters is split away anyway.)
    return " ".join(CONTROL_C0_C1.sub(" ", text).split())[:limit]


def reply_failure(server: str, error: ErrorData) -> ToolCallError | None:
    """The failure a request's error answer states (``agent_core.transport``): an error the
    server sent, a reply that could not be read, or a session the server ended; ``None``
    for an error the SDK raised itself (a timeout, a closed connection)."""
    if isinstance(error, UnreadableReply):
        return ToolProtocolError(server, f"{server} sent a reply that is not MCP ({error.message})")
    if isinstance(error, ServerError):
        return ToolResultError(server, one_line(error.message) or f"error {error.code}")
    if isinstance(error, SessionEnded):
        return SessionEndedError(server, f"{server} ended the session")
    return None


def classify_failure(server: str, exc: BaseException, statuses: list[int]) -> ToolCallError:
    """Map a transport failure (and the HTTP statuses seen) to a ``ToolCallError``."""
    codes = list(statuses)
    for cause in _root_causes(exc):
        if isinstance(cause, ToolCallError):
            return cause
        if isinstance(cause, McpError) and (stated := reply_failure(server, cause.error)):
            return stated
        if isinstance(cause, httpx.HTTPStatusError):
            codes.append(cause.response.status_code)
        if isinstance(cause, httpx.TimeoutException | TimeoutError):
            return ToolTimeoutError(server, f"{server} did not answer in time")
        if isinstance(cause, httpx.TransportError | OSError):
            return ToolTransientError(server, f"cannot reach {server}: {type(cause).__name__}")
    for status in codes:
        if status in (401, 403):
            return ToolAuthError(server, status)
    for status in codes:
        if status == 429 or status >= 500:
            return ToolTransientError(server, f"{server} answered HTTP {status}")
    return ToolTransientError(server, f"the connection to {server} failed")
