"""What both platforms' ack fronts hold (``bot.slack.front``, ``bot.teams.front``): their
own inbox on a small pool of the database, the main loop they hand runs to, the ack loop's
lag monitor, and how many messages they accepted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

from infra.clock import Clock
from infra.jobs import JobInbox, open_ack_inbox
from infra.observability.loop import LoopLagMonitor


class Notifiable(Protocol):
    def notify(self) -> None: ...


class WorkerWake:
    """Wakes a worker on the main loop from the ack loop, once per burst: while a wake-up is
    queued on the main loop, further messages need none (the worker claims every job stored
    before it runs, theirs included).

    Why: each ``call_soon_threadsafe`` writes to the main loop's self-pipe, a system call
    that lets go of the GIL, and the ack thread then waits for the busy main thread to hand
    it back (up to a switch interval) once per accepted message: ~11 % of the Teams ack
    thread's samples in a burst (py-spy)."""

    def __init__(self) -> None:
        self._queued = False

    def wake(self, main: asyncio.AbstractEventLoop, worker: Notifiable) -> None:
        """Called on the ack loop, after the message's job is stored."""
        if self._queued:
            return
        self._queued = True
        try:
            main.call_soon_threadsafe(self._woken, worker)
        except BaseException:
            self._queued = False  # nothing queued (a closed loop): the next one tries again
            raise

    def _woken(self, worker: Notifiable) -> None:
        # On the main loop. Cleared before notifying: a message stored after this line
        # queues a wake-up of its own; one stored before it is seen by the claim it starts.
        self._queued = False
        worker.notify()


class AckFrontBase:
    def __init__(self, database_url: str, pool_size: int, clock: Clock) -> None:
        self._url = database_url
        self._pool_size = max(1, pool_size)
        self._clock = clock
        self._inbox: JobInbox | None = None  # set while ``opened``
        self._main: asyncio.AbstractEventLoop | None = None  # where runs are woken
        self.monitor: LoopLagMonitor | None = None
        self.accepted = 0  # messages this front stored and acked (tests and benches read it)
        self._wake = WorkerWake()

    def _wake_worker(self, worker: Notifiable | None) -> None:
        """Wake this instance's worker (``worker``, when it runs here) for a stored job."""
        if worker is not None and self._main is not None:
            self._wake.wake(self._main, worker)

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
