"""This instance's worker for one chat platform's durable message jobs.

Slack's and Teams' durable adapters store each accepted message as a job (``infra.jobs``)
and answer it in ``run_job`` on whichever instance claims it; how that worker is started is
the same for both platforms, so it is written here once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Protocol, TypedDict

from sqlalchemy.ext.asyncio import AsyncEngine

from infra.jobs import Job, JobRunner, RunLimits, SqlJobQueue


class WorkerOptions(TypedDict, total=False):
    """How the worker runs jobs (``opsbot`` reads them from ``Settings.runs``): at most
    ``limits`` runs at once, each holding a ``lease`` it renews, new jobs looked for every
    ``poll_seconds`` when nothing woke the worker."""

    limits: RunLimits | None
    lease: timedelta
    poll_seconds: float


class DurableAdapter(Protocol):
    """A platform adapter that answers stored message jobs; ``runner`` is set while its
    worker runs, so that accepting a message can wake it."""

    runner: JobRunner | None

    async def run_job(self, job: Job) -> None: ...


@contextlib.asynccontextmanager
async def message_worker(
    adapter: DurableAdapter,
    queue: SqlJobQueue,
    kind: str,
    engine: AsyncEngine,
    options: WorkerOptions,
) -> AsyncIterator[JobRunner]:
    """Run ``adapter``'s jobs of ``kind`` while the block runs.

    On SQLite (the embedded, single-process default) unfinished runs are requeued at start;
    on PostgreSQL a dead instance's runs are taken over when their lease runs out. An
    instance that takes no runs (``global_runs=0``: a web instance beside workers) requeues
    nothing: the running jobs on the file are its worker's, alive."""
    limits = options.get("limits") or RunLimits()
    async with JobRunner(
        queue,
        adapter.run_job,
        limits,
        lease=options.get("lease", timedelta(seconds=30)),
        poll_seconds=options.get("poll_seconds", 1.0),
        recover_on_start=engine.dialect.name == "sqlite" and limits.global_runs > 0,
        kinds=(kind,),
    ) as runner:
        adapter.runner = runner
        yield runner
