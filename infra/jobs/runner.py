"""The worker loop: claim jobs within the run limits, run them, keep their leases alive.

Per-user and global limits hold across instances for claims (the table counts every live
lease), and within this process for what is already running here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType

from infra.jobs.queue import Job, SqlJobQueue

log = logging.getLogger(__name__)

JobHandler = Callable[[Job], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RunLimits:
    """At most ``global_runs`` runs in this process, ``per_user_runs`` per user overall."""

    global_runs: int = 32
    per_user_runs: int = 2


class JobRunner:
    """Runs jobs from ``queue`` with ``handler`` until the ``async with`` block exits.

    ``recover_on_start`` requeues every running job at start: only right when this is the
    only process on the database (the embedded SQLite default). With several instances,
    a dead worker's jobs come back when their lease runs out.
    """

    def __init__(
        self,
        queue: SqlJobQueue,
        handler: JobHandler,
        limits: RunLimits = RunLimits(),
        *,
        lease: timedelta = timedelta(seconds=30),
        poll_seconds: float = 1.0,
        recover_on_start: bool = False,
        worker_id: str | None = None,
    ) -> None:
        self.queue = queue
        self.worker_id = worker_id or f"w-{secrets.token_hex(6)}"
        self._handler = handler
        self._limits = limits
        self._lease = lease
        self._poll = poll_seconds
        self._recover = recover_on_start
        self._wake = asyncio.Event()
        self._running: dict[str, tuple[Job, asyncio.Task[None]]] = {}
        self._loops: list[asyncio.Task[None]] = []

    def notify(self) -> None:
        """A job was enqueued here: claim now rather than at the next poll."""
        self._wake.set()

    async def idle(self) -> None:
        """Wait until nothing runs in this process (finished jobs are recorded by then)."""
        while self._running:
            await asyncio.gather(*(t for _, t in list(self._running.values())))

    @property
    def running(self) -> list[Job]:
        return [job for job, _ in self._running.values()]

    async def __aenter__(self) -> JobRunner:
        if self._recover:
            recovered = await self.queue.release_all_running()
            if recovered:
                log.info("recovered %d unfinished runs", recovered)
        self._loops = [
            asyncio.create_task(self._claim_loop()),
            asyncio.create_task(self._renew_loop()),
        ]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Runs in flight are left running: their leases expire and a worker takes them over
        # (from their last checkpoint), exactly as after a crash.
        tasks = [*self._loops, *(t for _, t in self._running.values())]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _claim_loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self._claim()
            except Exception:
                log.exception("claiming jobs failed; retrying")
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
            # lands as its timeout fires, and this loop would then outlive the runner's exit.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await self._wake.wait()

    async def _claim(self) -> None:
        free = self._limits.global_runs - len(self._running)
        busy = Counter(job.user_key for job in self.running)
        jobs = await self.queue.claim(
            self.worker_id,
            lease=self._lease,
            limit=free,
            per_user=self._limits.per_user_runs,
            busy_users=busy,
        )
        for job in jobs:
            self._running[job.job_id] = (job, asyncio.create_task(self._run(job)))

    async def _run(self, job: Job) -> None:
        error: str | None = None
        try:
            await self._handler(job)
        except Exception as exc:
            log.exception("job %s (%s) failed", job.job_id, job.kind)
            error = type(exc).__name__
        try:
            if not await self.queue.finish(self.worker_id, job.job_id, error):
                log.warning("job %s was taken over by another worker", job.job_id)
        finally:
            self._running.pop(job.job_id, None)
            self._wake.set()

    async def _renew_loop(self) -> None:
        interval = max(self._lease.total_seconds() / 3, 0.05)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.queue.renew(self.worker_id, list(self._running), self._lease)
            except Exception:
                log.exception("renewing leases failed; retrying")
