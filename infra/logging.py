"""Structured logging (structlog): console for development, JSON for production."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import structlog
from aiohttp.http_exceptions import HttpProcessingError, PayloadEncodingError
from aiohttp.web_protocol import RequestPayloadError

if TYPE_CHECKING:
    from infra.settings import Settings


# The MCP SDK's streamable-HTTP transports log a full traceback at ERROR each time a
# session's standalone SSE stream is closed under its writer, which is how every session ends.
_MCP_STREAM_LOGGERS = ("mcp.client.streamable_http", "mcp.server.streamable_http")
_SSE_WRITER_ERROR = "Error in standalone SSE writer"


class _StreamCloseFilter(logging.Filter):
    """Drops the SDK's "standalone SSE writer" error when it only reports a closed stream; any
    other such error stays, as one line without a traceback (formatting it is costly)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(_SSE_WRITER_ERROR):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if type(exc).__name__ in ("ClosedResourceError", "BrokenResourceError", "EndOfStream"):
            return False
        record.msg = f"{_SSE_WRITER_ERROR}: {type(exc).__name__ if exc else 'no detail'}"
        record.exc_info = None
        record.exc_text = None
        return True


def quiet_mcp_streams() -> None:
    """Install the closed-stream filter on the MCP SDK's transport loggers (idempotent)."""
    for name in _MCP_STREAM_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _StreamCloseFilter) for f in logger.filters):
            logger.addFilter(_StreamCloseFilter())


class _BadRequestFilter(logging.Filter):
    """aiohttp's server logs each request it cannot parse (a raw byte or no colon in a header,
    a line over 8 KiB, a chunk size that is not hex, a negative length, an encoding it lacks)
    with a traceback, then answers it 400 itself: one WARNING line instead. A body that does
    not decode, met again while aiohttp drains it after the handler answered (and logged) it,
    goes to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        drained = str(record.msg).startswith("Unhandled exception")
        if drained and isinstance(exc, RequestPayloadError | PayloadEncodingError):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.msg, record.args = "an unreadable request body, drained: %s", (exc,)
            record.exc_info, record.exc_text = None, None
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        if isinstance(exc, HttpProcessingError):
            why = str(exc.message or type(exc).__name__).splitlines()[0]
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = "a request that is not valid HTTP refused with %s: %s: %.160r"
            record.args = (exc.code, type(exc).__name__, why)
            record.exc_info, record.exc_text = None, None
        return True


def quiet_bad_requests() -> None:
    """Install the malformed-request filter on aiohttp's server logger (idempotent)."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _BadRequestFilter) for f in logger.filters):
        logger.addFilter(_BadRequestFilter())


class AtDebug(logging.Filter):
    """A library's records that ``routine`` picks, demoted to DEBUG (dropped unless DEBUG
    is on for that logger); every other record passes as it is."""

    def __init__(self, tag: str, routine: Callable[[logging.LogRecord], bool]) -> None:
        super().__init__()
        self.tag = tag
        self._routine = routine

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._routine(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def demote_to_debug(
    logger_name: str, tag: str, routine: Callable[[logging.LogRecord], bool]
) -> None:
    """Install ``AtDebug(tag, routine)`` on ``logger_name`` (once per tag)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, AtDebug) and f.tag == tag for f in logger.filters):
        logger.addFilter(AtDebug(tag, routine))


@contextlib.contextmanager
def keep_root_handlers() -> Iterator[None]:
    """Undo the handlers and level a library installs on the root logger meanwhile (FastMCP
    calls ``logging.basicConfig`` with a rich handler and rich tracebacks): logging is the
    application's to configure."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


def configure_logging(settings: Settings, *, terminal: bool = False) -> None:
    """Console or JSON lines; colours and rich tracebacks only in a developer's terminal."""
    level = logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(
            colors=terminal,
            exception_formatter=(
                structlog.dev.default_exception_formatter
                if terminal
                else structlog.dev.plain_traceback
            ),
        )
    )
    logging.basicConfig(level=level, format="%(message)s")
    # Alembic narrates every step at INFO; operators only need its warnings.
    logging.getLogger("alembic").setLevel(max(level, logging.WARNING))
    # httpx logs every request at INFO: readiness probes (a few a second on an unready
    # instance) and MCP health checks would fill the log.
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))
    quiet_mcp_streams()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=True,
    )
    if settings.log_format == "json":
        # Standard-library loggers too as JSON lines, with request context, secrets scrubbed.
        from infra.observability.logs import configure_json_logging

        configure_json_logging(settings.log_level)
