"""Event-loop lag: how late a loop runs a callback that was due, sampled by a small task.

Lag is the time a ready callback waits behind the ones ahead of it: a request's ack, a
Slack retry deadline and a lease renewal all wait that long at every ``await``. A monitor
sleeps ``interval`` seconds, measures how much later than that it woke, and records the
difference in ``opsbot_event_loop_lag_seconds`` (labelled by loop: ``main`` runs the
agent, ``ack`` the Slack ack path when it has its own thread). It also keeps the recent
samples, so a bench can read exact percentiles rather than histogram buckets.

Example::

    async with LoopLagMonitor("main") as monitor:
        ...
        monitor.percentile(0.99)   # seconds
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, InitVar, dataclass, field

from prometheus_client import Histogram

from infra.lifecycle import Background, cancel_and_wait
from infra.observability import metrics as m

DEFAULT_INTERVAL = 0.02
# 5 minutes of samples at the default interval: enough for a bench, bounded for a server.
KEEP_SAMPLES = 15_000


@dataclass(eq=False, repr=False)
class LoopLagMonitor(Background):
    """Samples the running loop's lag every ``interval`` seconds while the block runs.

    ``clock`` and ``sleep`` are injectable so a test can drive the monitor without real
    waits (the defaults are the loop's own: monotonic time and ``asyncio.sleep``)."""

    loop_name: str
    _: KW_ONLY
    interval: float = DEFAULT_INTERVAL
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    keep: InitVar[int] = KEEP_SAMPLES
    samples: deque[float] = field(init=False)
    _histogram: Histogram = field(init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self, keep: int) -> None:
        self.samples = deque(maxlen=keep)
        self._histogram = m.LOOP_LAG.labels(loop=self.loop_name)

    def record(self, lag: float) -> None:
        lag = max(lag, 0.0)
        self.samples.append(lag)
        self._histogram.observe(lag)

    async def sample_once(self) -> float:
        """Sleep one interval; the lag seen (also recorded)."""
        started = self.clock()
        await self.sleep(self.interval)
        lag = self.clock() - started - self.interval
        self.record(lag)
        return lag

    async def run_forever(self) -> None:
        """Sample until cancelled."""
        while True:
            await self.sample_once()

    def reset(self) -> None:
        """Forget the kept samples (the histogram is cumulative, as Prometheus expects)."""
        self.samples.clear()

    def percentile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the kept samples, in seconds; 0.0 without samples."""
        ordered = sorted(self.samples)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run_forever())

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _start(self) -> None:
        self.start()

    async def _stop(self) -> None:
        await self.stop()
