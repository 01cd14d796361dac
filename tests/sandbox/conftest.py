"""Fixtures of the sandbox tests: ``harness`` (see ``tests/sandbox/harness.py``). The
``browser`` fixture and the skip-without-Chromium rule are in ``tests/fixtures/browser.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.sandbox.harness import Harness, open_harness


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with open_harness() as running:
        yield running
