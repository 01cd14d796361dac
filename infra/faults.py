"""Test-only crash points: the kill-at-each-point durability test
(``tests/reliability/test_reliability_kill_points.py``) sets ``OPSBOT_TEST_CRASH_AT`` and the
process SIGKILLs itself when a turn reaches that point, as a power cut or an OOM kill would.

Off by default (``Settings.test_crash_at`` unset): ``crash_point`` is then one set lookup.
``opsbot slack`` arms it at start (``arm``); nothing else does.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Literal

log = logging.getLogger(__name__)

CrashPoint = Literal["job_start", "tool_call", "before_card", "after_write"]
"""``job_start``: a stored (acknowledged) message's job starts on a worker. ``tool_call``: an
MCP tool call is at its server (a first run's is a read). ``before_card``: the run's interrupt
is saved and the reply with its card is not posted yet. ``after_write``: an approved write ran
at its server, its outcome and result are not saved and the run is not resumed."""

_armed: set[str] = set()


def arm(point: CrashPoint | None) -> None:
    """Crash the process the first time it reaches ``point`` (``None``: never)."""
    _armed.clear()
    if point is not None:
        _armed.add(point)


def crash_point(point: CrashPoint) -> None:
    """SIGKILL this process here if the test armed ``point``: no cleanup runs, nothing is
    flushed, as in a real crash."""
    if point in _armed:
        log.warning("test crash point %s reached: killing the process", point)
        os.kill(os.getpid(), signal.SIGKILL)
