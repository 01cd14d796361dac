"""Waiting on what a fake server recorded (``testing.slack.FakeSlack``, ``testing.teams``'s
fake Bot Connector): until enough matching calls arrived, or until calls stop coming."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sized
from typing import TypeVar

T = TypeVar("T")


async def wait_until(
    changed: asyncio.Condition | None,
    matching: Callable[[], list[T]],
    count: int,
    wait: float,
    what: str,
    seen: Callable[[], object],
) -> list[T]:
    """``matching()`` once it holds ``count`` calls (``changed`` is notified at each call);
    after ``wait`` seconds an ``AssertionError`` naming ``what`` was expected and the calls
    ``seen()``."""
    assert changed is not None, "the fake is not serving"

    async def wait_all() -> list[T]:
        async with changed:
            await changed.wait_for(lambda: len(matching()) >= count)
        return matching()

    try:
        return await asyncio.wait_for(wait_all(), wait)
    except TimeoutError:
        raise AssertionError(
            f"expected {count} {what}; got {len(matching())}. Calls: {seen()}"
        ) from None


async def settle(calls: Sized, quiet: float, limit: float, who: str) -> None:
    """Return once no call arrived for ``quiet`` seconds; fail after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    seen = -1
    while time.monotonic() < deadline:
        if len(calls) == seen:
            return
        seen = len(calls)
        await asyncio.sleep(quiet)
    raise AssertionError(f"{who} kept calling")
