"""Full garbage collections at the ack server's quiet moments, not in a burst of acks.

Why: a full (generation 2) collection holds the GIL for all of it, and the ack thread shares
the GIL with the agent turns. Even with start-up frozen (``infra.ack.freeze_start_up``) the
turns' own garbage cycles (anyio cancel scopes and tasks, exceptions with their tracebacks,
httpx/MCP streams: ~900 objects a turn) reached the old generation, and a full collection
took 16-55 ms on an idle machine (45-135 ms of CPU on a loaded one), started by CPython
whenever enough objects had been promoted: in the middle of a burst of acks as likely as
anywhere (the ack loop's lag p99 was that pause). Most of those cycles are now not made: a
run's MCP session ends without cancelling its tasks (``agent_core.sessions``), a closed
response lets go of its body (``agent_core.transport``), a retry object is cleared after its
call (``infra.retries``) and a failed call's traceback is dropped once it is a message
(``agent_core.middleware``). Under ``bench slack_ack --with-agent`` a full collection now
collects ~300 objects instead of ~13,000, and takes 8-21 ms instead of 11-53 ms: what is
left is walking the live objects of the runs in flight.

What ``FullCollections`` does, on the ack loop, while the block runs:

- CPython's own full collections are off: ``gc.set_threshold(t0, t1, NEVER)``; the young
  generations are collected as before (measured: a larger first threshold made each of them
  longer, up to 40 ms, for fewer of them);
- a full collection is due after ``FULL_AFTER`` collections of generation 1 (CPython's own
  default), and runs once no request has been in flight for ``QUIET`` seconds
  (``Traffic``, counted by its middleware);
- after ``FORCE_AFTER`` of them it runs whatever the traffic: under constant traffic the
  cycles cannot pile up, so memory stays bounded (at most ten times CPython's interval).

The young generations still pause the ack loop (a few ms each). CPython 3.14's incremental
collector ignores the third threshold; the paced collections then only add to its own.

Example::

    traffic = Traffic()
    app = web.Application(middlewares=[traffic.middleware])
    async with FullCollections(traffic):
        ...
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from infra.lifecycle import Background, cancel_and_wait

# Generation-1 collections since the last full one: due (CPython's default third threshold)
# and forced (ten times that, whatever the traffic).
FULL_AFTER = 10
FORCE_AFTER = 100
# Seconds without a request in flight before a due collection runs, and between checks.
QUIET = 0.2
CHECK_EVERY = 0.05
# A third threshold CPython never reaches: its own full collections are off.
NEVER = 2**30


class Traffic:
    """Requests in flight on a server, and when the last one ended (``middleware``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.in_flight = 0
        self.last_done = clock()

    def quiet_for(self) -> float:
        """Seconds since the last request ended; 0.0 while one is in flight."""
        return 0.0 if self.in_flight else self._clock() - self.last_done

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        self.in_flight += 1
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1
            self.last_done = self._clock()


class FullCollections(Background):
    """Runs the full collections itself, at ``traffic``'s quiet moments (see the module)."""

    def __init__(
        self,
        traffic: Traffic,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        collect: Callable[[], object] = gc.collect,
        count: Callable[[], tuple[int, int, int]] = gc.get_count,
    ) -> None:
        self._traffic = traffic
        self._sleep = sleep
        self._collect = collect
        self._count = count
        self._task: asyncio.Task[None] | None = None
        self.collections = 0  # full collections run (tests and benches read it)

    def check(self) -> bool:
        """Run a full collection if one is due and the server is quiet, or is forced."""
        since = self._count()[2]
        quiet = self._traffic.quiet_for() >= QUIET
        if since >= FORCE_AFTER or (since >= FULL_AFTER and quiet):
            self._collect()
            self.collections += 1
            return True
        return False

    async def _run(self) -> None:
        while True:
            await self._sleep(CHECK_EVERY)
            self.check()

    async def _start(self) -> None:
        _THRESHOLDS.hold()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        _THRESHOLDS.release()


class _Thresholds:
    """CPython's full collections off while at least one pacer runs (two ack servers in one
    process, as tests and benches start them, may overlap): the first saves the thresholds,
    the last puts them back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._saved: tuple[int, int, int] = gc.get_threshold()

    def hold(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._saved = gc.get_threshold()
                young, middle, _ = self._saved
                gc.set_threshold(young, middle, NEVER)
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                gc.set_threshold(*self._saved)


_THRESHOLDS = _Thresholds()
