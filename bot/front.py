"""What both platforms' ack fronts hold (``bot.slack.front``, ``bot.teams.front``): their
own inbox on a small pool of the database, the main loop they hand runs to, the ack loop's
lag monitor, and how many messages they accepted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from infra.clock import Clock
from infra.jobs import JobInbox, open_ack_inbox
from infra.observability.loop import LoopLagMonitor


class AckFrontBase:
    def __init__(self, database_url: str, pool_size: int, clock: Clock) -> None:
        self._url = database_url
        self._pool_size = max(1, pool_size)
        self._clock = clock
        self._inbox: JobInbox | None = None  # set while ``opened``
        self._main: asyncio.AbstractEventLoop | None = None  # where runs are woken
        self.monitor: LoopLagMonitor | None = None
        self.accepted = 0  # messages this front stored and acked (tests and benches read it)

    @contextlib.asynccontextmanager
    async def _opened_on(
        self, main: asyncio.AbstractEventLoop, lag_loop: str | None
    ) -> AsyncIterator[None]:
        """Remember ``main`` and open the inbox on its own engine and (with ``lag_loop``, the
        loop's name in ``opsbot_event_loop_lag_seconds``) the lag monitor, on the running
        (ack) loop; the inbox is dropped on exit."""
        self._main = main
        try:
            async with (
                open_ack_inbox(self._url, self._pool_size, self._clock) as inbox,
                contextlib.AsyncExitStack() as stack,
            ):
                if lag_loop is not None:
                    self.monitor = await stack.enter_async_context(LoopLagMonitor(lag_loop))
                self._inbox = inbox
                yield
        finally:
            self._inbox = None
