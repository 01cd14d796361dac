"""Fixtures of the sandbox tests: ``harness`` (see ``tests/sandbox/harness.py``) and
``browser`` (Debian's Chromium driven by Playwright; never ``playwright install``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from tests.sandbox.harness import Harness, open_harness


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with open_harness() as running:
        yield running


CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium() -> str:
    assert CHROMIUM.exists(), "Debian's chromium is missing: .ci/run installs it (apt-get)"
    return str(CHROMIUM)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        instance = await pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        try:
            yield instance
        finally:
            await instance.close()
