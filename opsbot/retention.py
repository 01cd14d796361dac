"""Retention: delete old threads (their checkpoints and rows) and, separately, old audit events.

**Threads.** A thread is old when it was created before the cut-off *and* its latest
checkpoint is older too (a long-running conversation is kept while it is active). Threads
with an approval still ``pending`` or ``deciding`` are kept whatever their age: deleting
their checkpoint would strand the decision. For each old thread: the checkpointer's
``adelete_thread`` (every checkpoint and write), its approvals and their chat card rows, then
the thread row. Finished run jobs older than the cut-off go too (their payload is the user's
message). Runs as the application's own database user.

**The audit log** is append-only by trigger (migration 0003), for every role the application
uses. Its retention is therefore a separate, deliberate, privileged path with its own
setting (``OPSBOT_RETENTION__AUDIT_DAYS``; unset = keep forever):

- PostgreSQL: a *superuser* connection (``--admin-database-url``, never the app's URL) sets
  ``session_replication_role = replica`` for one transaction — which only a superuser may do
  — and deletes events older than the cut-off. The trigger stays in place for everyone else.
- SQLite has no roles: whoever can write the file can do anything, so the trigger only guards
  against accidents. The path drops the DELETE trigger, deletes and re-creates the trigger in
  one transaction (SQLite DDL is transactional: a failure leaves the trigger in place).

Example::

    report = await prune_threads(engine, saver, older_than=timedelta(days=90), now=utc_now())
    removed = await prune_audit(admin_url, older_than=timedelta(days=365), now=utc_now())
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from sqlalchemy import and_, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.jobs.queue import JobStatus
from infra.storage import create_engine
from infra.storage.schema import (
    approvals,
    audit_events,
    chat_approval_messages,
    run_jobs,
    threads,
)

OPEN_STATUSES = ("pending", "deciding")
FINISHED_JOB_STATUSES = (JobStatus.DONE.value, JobStatus.FAILED.value)
SQLITE_DELETE_TRIGGER = (
    "CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events"
    " BEGIN SELECT RAISE(ABORT, 'audit_events is append-only'); END"
)


@dataclass(frozen=True, slots=True)
class PruneReport:
    cutoff: datetime
    deleted: list[str] = field(default_factory=list)  # thread ids
    kept_active: list[str] = field(default_factory=list)  # old, but a recent checkpoint
    kept_pending: list[str] = field(default_factory=list)  # old, but an open approval
    approvals_deleted: int = 0
    jobs_deleted: int = 0  # finished run jobs (their payload holds the user's message)

    def as_json(self) -> dict[str, Any]:
        return {
            "cutoff": self.cutoff.isoformat(),
            "threads_deleted": len(self.deleted),
            "kept_active": len(self.kept_active),
            "kept_pending_approval": len(self.kept_pending),
            "approvals_deleted": self.approvals_deleted,
            "jobs_deleted": self.jobs_deleted,
        }


def _last_checkpoint_at(checkpoint: Any) -> datetime | None:
    ts = checkpoint.get("ts") if isinstance(checkpoint, dict) else None
    if not isinstance(ts, str):
        return None
    at = datetime.fromisoformat(ts)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


async def prune_threads(
    engine: AsyncEngine,
    saver: BaseCheckpointSaver[str],
    *,
    older_than: timedelta,
    now: datetime,
    dry_run: bool = False,
    batch: int = 500,
) -> PruneReport:
    """Delete threads idle since before ``now - older_than`` (see the module docstring)."""
    cutoff = now - older_than
    report = PruneReport(cutoff)
    approvals_deleted = 0
    after: tuple[datetime, str] | None = None
    while True:
        page = await _candidates(engine, cutoff, after, batch)
        if not page:
            break
        after = page[-1]
        approvals_deleted += await _prune_page(
            engine, saver, [t for _, t in page], cutoff, report, dry_run=dry_run
        )
    jobs_deleted = 0 if dry_run else await _prune_finished_jobs(engine, cutoff)
    return PruneReport(
        cutoff,
        report.deleted,
        report.kept_active,
        report.kept_pending,
        approvals_deleted,
        jobs_deleted,
    )


async def _prune_finished_jobs(engine: AsyncEngine, cutoff: datetime) -> int:
    """Delete run jobs that finished before ``cutoff``; queued and running ones stay."""
    c = run_jobs.c
    async with engine.begin() as conn:
        result = await conn.execute(
            delete(run_jobs).where(c.status.in_(FINISHED_JOB_STATUSES), c.finished_at < cutoff)
        )
    return result.rowcount or 0


async def _candidates(
    engine: AsyncEngine, cutoff: datetime, after: tuple[datetime, str] | None, batch: int
) -> list[tuple[datetime, str]]:
    """Threads created before ``cutoff``, in (created_at, thread_id) order after ``after``."""
    c = threads.c
    stmt = select(c.created_at, c.thread_id).where(c.created_at < cutoff)
    if after is not None:
        stmt = stmt.where(
            or_(c.created_at > after[0], and_(c.created_at == after[0], c.thread_id > after[1]))
        )
    stmt = stmt.order_by(c.created_at, c.thread_id).limit(batch)
    async with engine.connect() as conn:
        return [(row.created_at, row.thread_id) for row in await conn.execute(stmt)]


async def _prune_page(
    engine: AsyncEngine,
    saver: BaseCheckpointSaver[str],
    candidates: list[str],
    cutoff: datetime,
    report: PruneReport,
    *,
    dry_run: bool,
) -> int:
    async with engine.connect() as conn:
        pending = set(
            (
                await conn.execute(
                    select(approvals.c.thread_id).where(
                        approvals.c.thread_id.in_(candidates),
                        approvals.c.status.in_(OPEN_STATUSES),
                    )
                )
            )
            .scalars()
            .all()
        )
    approvals_deleted = 0
    for thread_id in candidates:
        if thread_id in pending:
            report.kept_pending.append(thread_id)
            continue
        latest = await saver.aget_tuple({"configurable": {"thread_id": thread_id}})
        last = None if latest is None else _last_checkpoint_at(latest.checkpoint)
        if last is not None and last >= cutoff:
            report.kept_active.append(thread_id)
            continue
        report.deleted.append(thread_id)
        if dry_run:
            continue
        # Checkpoints first: a crash in between leaves a row without state (harmless, pruned
        # next time), never state without its owner row (which would be unreachable).
        await saver.adelete_thread(thread_id)
        async with engine.begin() as conn:
            ids = select(approvals.c.approval_id).where(approvals.c.thread_id == thread_id)
            await conn.execute(
                delete(chat_approval_messages).where(chat_approval_messages.c.approval_id.in_(ids))
            )
            result = await conn.execute(
                delete(approvals).where(
                    approvals.c.thread_id == thread_id, approvals.c.status.not_in(OPEN_STATUSES)
                )
            )
            approvals_deleted += result.rowcount or 0
            await conn.execute(delete(threads).where(threads.c.thread_id == thread_id))
    return approvals_deleted


async def prune_audit(admin_url: str, *, older_than: timedelta, now: datetime) -> int:
    """Delete audit events older than ``now - older_than`` through the privileged path.

    ``admin_url`` must be a PostgreSQL superuser (the trigger refuses everyone else), or the
    SQLite file. Returns how many events were deleted.
    """
    cutoff = now - older_than
    engine = create_engine(admin_url)
    try:
        async with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                # Only a superuser may set this; for anyone else it fails and nothing happens.
                await conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
                result = await conn.execute(delete(audit_events).where(audit_events.c.at < cutoff))
            else:
                await conn.exec_driver_sql("DROP TRIGGER audit_events_no_delete")
                result = await conn.execute(delete(audit_events).where(audit_events.c.at < cutoff))
                await conn.exec_driver_sql(SQLITE_DELETE_TRIGGER)
            return int(result.rowcount or 0)
    finally:
        await engine.dispose()
