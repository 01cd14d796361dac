"""An event loop on a thread of its own, and calls between two loops.

The Slack ack path runs on one (``bot.slack.server``): the agent runs on the main loop, and
a loop busy with agent steps delays every callback queued behind them (event-loop lag), so a
request acked on that loop waits for the agents at each ``await``. On its own loop the ack
waits only for the GIL, which Python hands over every switch interval.

Example::

    async with LoopThread("slack-ack") as thread:
        url = await thread.run(start_server())            # runs on the thread's loop
        ...
        # on the thread's loop, to call back into the caller's loop:
        await on_loop(main_loop, assistant.handle(...))
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from infra.lifecycle import Background

T = TypeVar("T")


async def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on ``loop`` (another thread's) and await its result here; cancelling the
    caller cancels it there. On the same loop it is simply awaited."""
    if loop is asyncio.get_running_loop():
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


class LoopThread(Background):
    """A daemon thread running its own event loop until the block exits."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this thread's loop; await its result on the caller's."""
        return await on_loop(self.loop, coro)

    async def _start(self) -> None:
        self._thread.start()

    async def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self._thread.join, 10)
