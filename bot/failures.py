"""Why answering a chat message failed, told the same way on every platform.

A lost database connection is no bug to trace: the person is asked to send the message again
(a durable run is put back in the queue instead, before this is reached). Anything else is
logged with its traceback and the person reads that nothing was changed.
"""

from __future__ import annotations

import logging

from infra.storage.faults import is_connection_error

log = logging.getLogger(__name__)


def answer_failed(exc: Exception, platform: str, user_id: str) -> bool:
    """Log why answering ``user_id``'s message on ``platform`` failed; True when the database
    was unreachable (the person is asked to try again), False for any other failure."""
    if is_connection_error(exc):
        log.warning(
            "database unreachable while answering %s user %s; asked them to try again: %s",
            platform,
            user_id,
            type(exc).__name__,
        )
        return True
    log.error("assistant failed on a %s message", platform, exc_info=exc)
    return False
