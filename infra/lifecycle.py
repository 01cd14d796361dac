"""Background machinery used as ``async with``: started on entry, stopped on exit.

The job runner, the inbox writers, the loop-lag monitor and the ack loop thread all follow
this shape; the exit runs even when the block raised, so nothing they started outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any, Self


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` (``None``: nothing runs) and wait until it has ended, so nothing it
    does outlives the caller; the ``CancelledError`` it ends with is the expected end."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class Background:
    """Subclasses say how they start and stop; entering and leaving the block calls them."""

    async def _start(self) -> None:
        """Start the tasks or thread; runs on ``async with`` entry."""

    async def _stop(self) -> None:
        """Stop what ``_start`` started; runs on exit, also when the block raised."""

    async def __aenter__(self) -> Self:
        await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()
