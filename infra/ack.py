"""What an ack front (Slack's ``bot.slack.front``, Teams' ``bot.teams.front``) answers when it
could not store a delivery: ``503`` with ``Retry-After`` and one log line, never a 500.

Why 503 for every storage error: nothing was stored or marked seen, so the platform must
deliver the message again, and a 503 says "try later" where a 500 says "this request is
broken". Whatever failed (a dropped connection, a full disk, a locked SQLite file past its
wait), the same request can succeed later.

Example::

    try:
        first = await inbox.put(delivery)
    except Exception as exc:
        return not_stored(exc, event_id, platform="Slack")
"""

from __future__ import annotations

import logging

from aiohttp import web

from infra.storage.faults import is_connection_error

log = logging.getLogger(__name__)

# Seconds a sender should wait before delivering again (Teams honours it; Slack retries on
# its own schedule, the header costs nothing there).
RETRY_AFTER_SECONDS = 5


def not_stored(exc: BaseException, what: str, *, platform: str) -> web.Response:
    """The answer for a delivery ``what`` that could not be stored because of ``exc``."""
    if is_connection_error(exc):
        log.warning(
            "database unavailable while accepting %s, answered 503 so %s redelivers: %s",
            what or "a message",
            platform,
            type(exc).__name__,
        )
    else:
        # One line, no traceback: the cause is in the exception's own text.
        log.error(
            "could not store %s, answered 503 so %s redelivers: %s: %s",
            what or "a message",
            platform,
            type(exc).__name__,
            str(exc).splitlines()[0][:300] if str(exc) else "",
        )
    return web.Response(status=503, text="", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
