"""The worker loop: claim jobs within the run limits, run them, keep their leases alive.

Per-user and global limits hold across instances for claims (the table counts every live
lease), and within this process for what is already running here.

Faults: a job whose handler fails with a database connection error (``is_connection_error``)
goes back in the queue with exponential back-off, up to the queue's ``max_attempts``; its
outcome (``finish``/``retry``) is written through a short outage. A claim loop that cannot
reach its table backs off (to ``max_backoff``) and says why once per streak of failures, not
once per poll: "database schema is at revision X, expected Y: run `opsbot migrate`" when the
database has not been migrated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import timedelta

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from infra.jobs.queue import Job, SqlJobQueue
from infra.jobs.spool import SpoolMover
from infra.lifecycle import Background
from infra.retries import retried
from infra.storage.faults import is_connection_error
from infra.storage.migrate import SchemaOutOfDateError, check_schema, report_schema

log = logging.getLogger(__name__)


def retry_delay(attempts: int, *, first: float = 1.0, cap: float = 30.0) -> float:
    """How long a job that failed its ``attempts``-th attempt on a connection error waits:
    1, 2, 4, ... seconds, at most ``cap``.

    >>> [retry_delay(n) for n in (1, 2, 3, 7)]
    [1.0, 2.0, 4.0, 30.0]
    """
    return float(min(first * 2.0 ** max(attempts - 1, 0), cap))


JobHandler = Callable[[Job], Awaitable[None]]


async def through_outage(
    write: Callable[..., Awaitable[bool]], *args: object, within: float = 30.0
) -> bool:
    """``write(*args)``, retried on database connection errors for up to ``within`` seconds
    (a job's outcome or progress, which must not be lost to a short outage: the renew loop
    keeps the lease meanwhile; past it, another worker may take the job)."""
    retrying = AsyncRetrying(
        retry=retry_if_exception(is_connection_error),
        wait=wait_exponential(multiplier=0.2, max=5.0),
        stop=stop_after_delay(within),
        reraise=True,
    )
    return await retried(retrying, write, *args)


@dataclass(frozen=True, slots=True)
class RunLimits:
    """At most ``global_runs`` runs in this process, ``per_user_runs`` per user overall."""

    global_runs: int = 32
    per_user_runs: int = 2


class JobRunner(Background):
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
        max_backoff: float = 10.0,
        kinds: Collection[str] | None = None,
    ) -> None:
        self.queue = queue
        self.worker_id = worker_id or f"w-{secrets.token_hex(6)}"
        self._handler = handler
        self._limits = limits
        self._lease = lease
        self._poll = poll_seconds
        self._recover = recover_on_start
        # Only these job kinds (None: all): Slack's and Teams' workers share one queue table.
        self._kinds = frozenset(kinds) if kinds is not None else None
        self._max_backoff = max(max_backoff, poll_seconds)
        self.claim_attempts = 0  # claim-loop iterations (a test checks it does not spin)
        self._claim_failures = 0
        self._wake = asyncio.Event()
        self._running: dict[str, tuple[Job, asyncio.Task[None]]] = {}
        self._loops: list[asyncio.Task[None]] = []
        # On SQLite the ack front stores jobs in a spool file of their own (infra.jobs.spool):
        # moved in before each claim, and at start (what was acked before a crash).
        self._spool = SpoolMover(queue.engine) if queue.engine.dialect.name == "sqlite" else None

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

    async def _start(self) -> None:
        if self._recover:
            try:
                recovered = await self.queue.release_all_running(self._kinds)
            except Exception as exc:  # e.g. not migrated: the claim loop says why, once
                log.debug("recovering unfinished runs failed: %s", type(exc).__name__)
            else:
                if recovered:
                    log.info("recovered %d unfinished runs", recovered)
        self._loops = [
            asyncio.create_task(self._claim_loop()),
            asyncio.create_task(self._renew_loop()),
        ]

    async def _stop(self) -> None:
        # Runs in flight are left running: their leases expire and a worker takes them over
        # (from their last checkpoint), exactly as after a crash.
        tasks = [*self._loops, *(t for _, t in self._running.values())]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._spool is not None:
            await self._spool.close()

    async def _claim_loop(self) -> None:
        while True:
            self._wake.clear()
            self.claim_attempts += 1
            try:
                await self._claim()
            except Exception as exc:
                self._claim_failures += 1
                if self._claim_failures == 1:
                    await self._explain(exc)
            else:
                if self._claim_failures:
                    log.info("claiming jobs works again")
                    report_schema(None)
                self._claim_failures = 0
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
            # lands as its timeout fires, and this loop would then outlive the runner's exit.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._pause()):
                    await self._wake.wait()

    def _pause(self) -> float:
        """The poll interval; doubled per failed claim in a row, up to ``max_backoff``."""
        if not self._claim_failures:
            return self._poll
        return min(self._poll * 2.0 ** min(self._claim_failures, 16), self._max_backoff)

    async def _explain(self, exc: Exception) -> None:
        """One log line for a streak of failed claims: the cause an operator can act on."""
        if is_connection_error(exc):
            log.warning(
                "claiming jobs failed: database unreachable (%s); retrying with back-off",
                type(exc).__name__,
            )
            return
        try:
            await check_schema(self.queue.engine)
        except SchemaOutOfDateError as schema:
            report_schema(schema)  # once per process, however many loops run into it
            return
        except Exception:  # noqa: S110 — the claim's own error is logged below
            pass
        log.error("claiming jobs failed; retrying with back-off", exc_info=exc)

    async def _claim(self) -> None:
        if self._spool is not None:
            await self._spool.move(self._kinds)
        free = self._limits.global_runs - len(self._running)
        busy = Counter(job.user_key for job in self.running)
        jobs = await self.queue.claim(
            self.worker_id,
            lease=self._lease,
            limit=free,
            per_user=self._limits.per_user_runs,
            busy_users=busy,
            kinds=self._kinds,
        )
        for job in jobs:
            self._running[job.job_id] = (job, asyncio.create_task(self._run(job)))

    async def _run(self, job: Job) -> None:
        error: str | None = None
        try:
            try:
                await self._handler(job)
            except Exception as exc:
                if is_connection_error(exc) and not job.last_attempt:
                    await self._retry_later(job, exc)
                    return
                log.exception("job %s (%s) failed", job.job_id, job.kind)
                error = type(exc).__name__
            if not await self._persist(self.queue.finish, self.worker_id, job.job_id, error):
                log.warning("job %s was taken over by another worker", job.job_id)
        except Exception as exc:  # the database stayed away: the lease brings the job back
            log.warning("job %s: recording its outcome failed (%s)", job.job_id, type(exc).__name__)
        finally:
            self._running.pop(job.job_id, None)
            self._wake.set()

    async def _retry_later(self, job: Job, exc: Exception) -> None:
        delay = retry_delay(job.attempts)
        log.warning(
            "job %s (%s): database connection error (%s) on attempt %d of %d; retrying in %.0f s",
            job.job_id,
            job.kind,
            type(exc).__name__,
            job.attempts,
            job.max_attempts,
            delay,
        )
        after = timedelta(seconds=delay)
        if not await self._persist(self.queue.retry, self.worker_id, job, after):
            log.warning("job %s was taken over by another worker", job.job_id)

    async def _persist(self, write: Callable[..., Awaitable[bool]], *args: object) -> bool:
        return await through_outage(write, *args, within=self._lease.total_seconds())

    async def _renew_loop(self) -> None:
        interval = max(self._lease.total_seconds() / 3, 0.05)
        failing = False
        while True:
            await asyncio.sleep(interval)
            try:
                await self.queue.renew(self.worker_id, list(self._running), self._lease)
            except Exception as exc:
                if not failing:  # once per outage, not once per tick
                    log.warning("renewing leases failed (%s); retrying", type(exc).__name__)
                failing = True
            else:
                failing = False
