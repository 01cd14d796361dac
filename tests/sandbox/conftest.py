"""Fixtures of the sandbox tests: ``harness`` (see ``tests/sandbox/harness.py``) and ``dev``
(the real ``opsbot dev`` process, bot ready, for the browser tests). The
``browser`` fixture and the skip-without-Chromium rule are in ``tests/fixtures/browser.py``."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.sandbox.harness import Harness, open_harness
from tests.sandbox.sandbox_process import DevProcess, run_opsbot_dev


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with open_harness() as running:
        yield running


@pytest.fixture
async def dev(tmp_path: Path) -> AsyncIterator[DevProcess]:
    # stopped with SIGTERM (as a process manager would); Ctrl-C is in test_sandbox_cli.py
    async with run_opsbot_dev(tmp_path / "data", signal.SIGTERM, bot_ready=True) as running:
        yield running
    assert running.returncode == 0, running.stderr()
    assert "Traceback" not in running.stderr_after_stop(), running.stderr()
