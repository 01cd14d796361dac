"""JSON logs (structlog) for every logger — structlog's and the standard library's — with the
request's context bound, and secrets and tool output scrubbed on the way out.

``request_context(...)`` binds fields (a fresh ``request_id``, route, thread_id, the
pseudonymous user) to everything logged inside it, across awaits. The scrubber drops values
under secret-looking or output-looking keys and masks bearer tokens and JWTs inside text,
as a last line of defence: code must not log them in the first place.

Example::

    configure_json_logging("INFO")
    with request_context(route="/slack/events"):
        log.info("handled")   # {"event": "handled", "route": ..., "request_id": ..., ...}
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog

REDACTED = "[redacted]"
_SECRET_KEY = re.compile(
    r"(token|secret|password|passwd|authorization|api[_-]?key|cookie|credential|private[_-]?key)",
    re.IGNORECASE,
)
_OUTPUT_KEY = re.compile(r"^(tool_output|tool_result|output|result|content|raw)$", re.IGNORECASE)
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]+=*")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")
_SLACK_TOKEN = re.compile(r"\bxox[abpre]-[A-Za-z0-9-]+")


def scrub_text(value: str) -> str:
    value = _BEARER.sub("Bearer " + REDACTED, value)
    value = _JWT.sub(REDACTED, value)
    return _SLACK_TOKEN.sub(REDACTED, value)


def _scrub(value: Any, depth: int = 0) -> Any:
    if depth > 6:
        return REDACTED
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and (_SECRET_KEY.search(k) or _OUTPUT_KEY.match(k))
            else _scrub(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_scrub(v, depth + 1) for v in value]
    return value


def scrub(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: no secrets, no raw tool output."""
    for key in list(event):
        if key in ("event", "level", "timestamp", "logger"):
            if isinstance(event[key], str):
                event[key] = scrub_text(event[key])
            continue
        if _SECRET_KEY.search(key) or _OUTPUT_KEY.match(key):
            event[key] = REDACTED
        else:
            event[key] = _scrub(event[key])
    return event


@contextmanager
def request_context(**fields: Any) -> Iterator[str]:
    """Bind ``request_id`` (new) and ``fields`` to every log line inside the block."""
    request_id = fields.pop("request_id", None) or secrets.token_hex(8)
    tokens = structlog.contextvars.bind_contextvars(request_id=request_id, **fields)
    try:
        yield request_id
    finally:
        structlog.contextvars.reset_contextvars(**tokens)


def _shared_processors() -> list[structlog.typing.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        scrub,
    ]


def configure_json_logging(level: str = "INFO", *, stream: Any = None) -> None:
    """JSON lines on stderr (or ``stream``) for structlog and standard-library loggers."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.JSONRenderer(),
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    logging.getLogger("alembic").setLevel(max(numeric, logging.WARNING))
    structlog.configure(
        processors=[
            *_shared_processors(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=False,
    )
