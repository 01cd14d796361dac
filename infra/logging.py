"""Structured logging (structlog): console for development, JSON for production."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from infra.settings import Settings


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
