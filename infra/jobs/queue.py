"""The job table: enqueue once per key, claim with a lease, renew, finish.

Claims are compare-and-set ``UPDATE``s on the row read (status, owner, lease), so two
workers on two instances can never both claim a job, on SQLite or PostgreSQL alike.

A job put back by ``retry`` is queued with ``lease_until`` as the time it may run again
(a queued job's lease column is its "not before"); ``attempts`` counts the claims, and
``Job.last_attempt`` says when a retry is no longer allowed.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.clock import Clock, utc_now
from infra.storage.lease import take_lease
from infra.storage.schema import run_jobs
from infra.storage.store import SqlStore


class JobError(Exception):
    """Base class for job queue errors."""


class DuplicateJobError(JobError):
    """A job with this id exists already."""


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a job is asked to do: its id, its kind, whose runs it counts against
    (``user_key``) and its payload."""

    job_id: str
    kind: str
    user_key: str
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Job(JobSpec):
    """A stored job, as a worker claims it."""

    attempts: int
    created_at: datetime
    max_attempts: int = 1

    @property
    def last_attempt(self) -> bool:
        """No retry after this one (the handler should answer, whatever happens)."""
        return self.attempts >= self.max_attempts


# Enough attempts, with the runner's back-off, to outlast a database restart of a minute.
MAX_ATTEMPTS = 8


class SqlJobQueue(SqlStore):
    def __init__(
        self, engine: AsyncEngine, clock: Clock = utc_now, *, max_attempts: int = MAX_ATTEMPTS
    ) -> None:
        super().__init__(engine, clock)
        self.max_attempts = max_attempts

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def enqueue(
        self, job_id: str, kind: str, user_key: str, payload: Mapping[str, Any]
    ) -> bool:
        """Add a job; ``False`` if ``job_id`` was enqueued before (a redelivery)."""
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    run_jobs.insert().values(
                        job_id=job_id,
                        kind=kind,
                        user_key=user_key,
                        payload=dict(payload),
                        status=JobStatus.QUEUED.value,
                        attempts=0,
                        created_at=self._clock(),
                    )
                )
        except IntegrityError:
            return False
        return True

    async def claim(
        self,
        worker: str,
        *,
        lease: timedelta,
        limit: int,
        per_user: int,
        busy_users: Mapping[str, int] | None = None,
        kinds: Collection[str] | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` runnable jobs (queued, or running with an expired lease),
        oldest first, at most ``per_user`` running per user across all workers; only jobs of
        ``kinds`` when given (one process may run a worker per chat platform)."""
        if limit <= 0:
            return []
        now = self._clock()
        c = run_jobs.c
        runnable = or_(
            and_(
                c.status == JobStatus.QUEUED.value,
                or_(c.lease_until.is_(None), c.lease_until <= now),
            ),
            and_(c.status == JobStatus.RUNNING.value, c.lease_until < now),
        )
        if kinds is not None:
            runnable = and_(runnable, c.kind.in_(list(kinds)))
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(run_jobs).where(runnable).order_by(c.created_at).limit(limit * 4)
                )
            ).all()
            live = and_(c.status == JobStatus.RUNNING.value, c.lease_until >= now)
            counts = await conn.execute(
                select(c.user_key, func.count()).where(live).group_by(c.user_key)
            )
            running: dict[str, int] = {str(u): int(n) for u, n in counts.all()}
        for user, n in (busy_users or {}).items():
            running[user] = max(running.get(user, 0), n)
        claimed: list[Job] = []
        for row in rows:
            if len(claimed) >= limit:
                break
            m = row._mapping
            if running.get(m["user_key"], 0) >= per_user:
                continue
            if await self._take(m, worker, now + lease):
                running[m["user_key"]] = running.get(m["user_key"], 0) + 1
                claimed.append(
                    Job(
                        m["job_id"],
                        m["kind"],
                        m["user_key"],
                        m["payload"],
                        m["attempts"] + 1,
                        m["created_at"],
                        self.max_attempts,
                    )
                )
        return claimed

    async def _take(self, row: Mapping[Any, Any], worker: str, lease_until: datetime) -> bool:
        c = run_jobs.c
        same = [c.job_id == row["job_id"], c.status == row["status"]]
        same.append(c.owner.is_(None) if row["owner"] is None else c.owner == row["owner"])
        if row["lease_until"] is not None:
            same.append(c.lease_until == row["lease_until"])
        return await take_lease(
            self._engine,
            run_jobs,
            same,
            status=JobStatus.RUNNING.value,
            owner=worker,
            lease_until=lease_until,
            attempts=row["attempts"] + 1,
        )

    async def renew(self, worker: str, job_ids: Sequence[str], lease: timedelta) -> None:
        if not job_ids:
            return
        c = run_jobs.c
        async with self._engine.begin() as conn:
            await conn.execute(
                update(run_jobs)
                .where(c.job_id.in_(list(job_ids)), c.owner == worker)
                .where(c.status == JobStatus.RUNNING.value)
                .values(lease_until=self._clock() + lease)
            )

    async def update_payload(self, job: Job, payload: Mapping[str, Any]) -> bool:
        """Replace the payload of a job this attempt still holds (a run's progress, so a
        retry does not repeat it); ``False`` if another attempt took the job over."""
        c = run_jobs.c
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(run_jobs)
                .where(c.job_id == job.job_id, c.attempts == job.attempts)
                .where(c.status == JobStatus.RUNNING.value)
                .values(payload=dict(payload))
            )
        return result.rowcount == 1

    async def finish(self, worker: str, job_id: str, error: str | None = None) -> bool:
        """Mark the job done (or failed); ``False`` if another worker took it over meanwhile."""
        c = run_jobs.c
        status = JobStatus.FAILED if error else JobStatus.DONE
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(run_jobs)
                .where(c.job_id == job_id, c.owner == worker)
                .where(c.status == JobStatus.RUNNING.value)
                .values(
                    status=status.value,
                    finished_at=self._clock(),
                    lease_until=None,
                    error=(error or None) and error[:500],
                )
            )
        return result.rowcount == 1

    async def retry(self, worker: str, job: Job, after: timedelta) -> bool:
        """Put a job this attempt holds back in the queue, to be claimed again no sooner
        than ``after`` from now; ``False`` if another worker took it over meanwhile."""
        c = run_jobs.c
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(run_jobs)
                .where(c.job_id == job.job_id, c.owner == worker, c.attempts == job.attempts)
                .where(c.status == JobStatus.RUNNING.value)
                .values(
                    status=JobStatus.QUEUED.value,
                    owner=None,
                    lease_until=self._clock() + after,
                )
            )
        return result.rowcount == 1

    async def release_all_running(self, kinds: Collection[str] | None = None) -> int:
        """Requeue every running job (of ``kinds``, when given) at once (embedded,
        single-process start: no other worker can hold one, so the previous process's leases
        need not run out)."""
        c = run_jobs.c
        running = c.status == JobStatus.RUNNING.value
        if kinds is not None:
            running = and_(running, c.kind.in_(list(kinds)))
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(run_jobs)
                .where(running)
                .values(status=JobStatus.QUEUED.value, owner=None, lease_until=None)
            )
        return int(result.rowcount or 0)

    async def status(self, job_id: str) -> tuple[JobStatus, int] | None:
        c = run_jobs.c
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(select(c.status, c.attempts).where(c.job_id == job_id))
            ).first()
        return None if row is None else (JobStatus(row[0]), int(row[1]))
