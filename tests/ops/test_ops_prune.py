"""Done-when: ``opsbot prune`` removes old threads (checkpoints and rows) on SQLite and
PostgreSQL and leaves newer, active and pending ones intact; the audit log is pruned only
through its own privileged path."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timedelta

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import DatabaseError
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core.checkpointer import open_checkpointer
from agent_core.threads import PlatformRef, SqlThreadStore
from audit.log import AuditLog, EventKind, SqlAuditSink
from infra.clock import utc_now
from infra.settings import RetentionSettings, Settings
from infra.storage import create_engine
from infra.storage.schema import approvals, audit_events, chat_approval_messages, threads
from opsbot.cli import build_parser
from opsbot.retention import prune_audit, prune_threads
from tests import forkserver

NOW = utc_now()
OLD = NOW - timedelta(days=100)
RECENT = NOW - timedelta(days=1)


async def _thread(engine: AsyncEngine, at: datetime, ts: str) -> str:
    store = SqlThreadStore(engine, clock=lambda: at)
    thread = await store.get_or_create(PlatformRef("slack", "T1", "C1", ts), "alice")
    return thread.thread_id


async def _checkpoint(saver: BaseCheckpointSaver[str], thread_id: str, at: datetime) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["ts"] = at.isoformat()
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    saved = await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {})  # type: ignore[arg-type]
    await saver.aput_writes(saved, [("messages", "hello")], task_id="t1")


async def _approval(engine: AsyncEngine, thread_id: str, approval_id: str, status: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(approvals).values(
                approval_id=approval_id,
                thread_id=thread_id,
                requester_subject="alice",
                requester_chat_user=None,
                actions=[],
                reads=[],
                created_at=OLD,
                expires_at=OLD + timedelta(hours=1),
                status=status,
                decisions=[],
                outcome={},
            )
        )
        await conn.execute(
            insert(chat_approval_messages).values(
                approval_id=approval_id,
                platform="slack",
                team_id="T1",
                card_channel_id="C0APPROVALS",
                card_ts="1.0",
                requester_channel_id="C1",
                requester_thread_ts="1.0",
                created_at=OLD,
            )
        )


async def _checkpoints(saver: BaseCheckpointSaver[str], thread_id: str) -> int:
    return len([c async for c in saver.alist({"configurable": {"thread_id": thread_id}})])


async def _rows(engine: AsyncEngine, table: object, column: object, value: str) -> int:
    async with engine.connect() as conn:
        return int(
            (await conn.execute(select(func.count()).where(column == value))).scalar_one()  # type: ignore[operator]
        )


@pytest.fixture
async def world(database_url: str) -> dict[str, str]:
    """Five threads: old+idle, old+decided approval, old but active, old with a pending
    approval, and new."""
    engine = create_engine(database_url)
    try:
        async with open_checkpointer(database_url) as saver:
            ids = {
                "old_idle": await _thread(engine, OLD, "1.1"),
                "old_decided": await _thread(engine, OLD, "1.2"),
                "old_active": await _thread(engine, OLD, "1.3"),
                "old_pending": await _thread(engine, OLD, "1.4"),
                "new": await _thread(engine, RECENT, "1.5"),
            }
            for name, thread_id in ids.items():
                recent = name in ("old_active", "new")
                await _checkpoint(saver, thread_id, RECENT if recent else OLD)
            await _approval(engine, ids["old_decided"], "ap-decided", "approved")
            await _approval(engine, ids["old_pending"], "ap-pending", "pending")
    finally:
        await engine.dispose()
    return ids


async def _state(url: str, ids: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Per thread: (thread rows, checkpoints)."""
    engine = create_engine(url)
    try:
        async with open_checkpointer(url) as saver:
            return {
                name: (
                    await _rows(engine, threads, threads.c.thread_id, tid),
                    await _checkpoints(saver, tid),
                )
                for name, tid in ids.items()
            }
    finally:
        await engine.dispose()


async def test_opsbot_prune_removes_old_threads_and_keeps_the_rest(
    database_url: str, world: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert all(v == (1, 1) for v in (await _state(database_url, world)).values())
    settings = Settings(_env_file=None, database_url=database_url)  # type: ignore[call-arg]

    dry = build_parser().parse_args(["prune", "--older-than", "30d", "--dry-run"])
    assert await dry.handler(dry, settings) == 0
    assert '"threads_deleted": 2' in capsys.readouterr().out
    assert all(v == (1, 1) for v in (await _state(database_url, world)).values())

    args = build_parser().parse_args(["prune", "--older-than", "30d"])
    assert await args.handler(args, settings) == 0
    out = capsys.readouterr().out
    assert '"threads_deleted": 2' in out
    assert '"approvals_deleted": 1' in out

    state = await _state(database_url, world)
    assert state["old_idle"] == (0, 0)
    assert state["old_decided"] == (0, 0)
    assert state["old_active"] == (1, 1)  # recent checkpoint: still in use
    assert state["old_pending"] == (1, 1)  # an approval still waits on it
    assert state["new"] == (1, 1)
    engine = create_engine(database_url)
    try:
        assert await _rows(engine, approvals, approvals.c.approval_id, "ap-decided") == 0
        assert await _rows(engine, approvals, approvals.c.approval_id, "ap-pending") == 1
        assert (
            await _rows(
                engine,
                chat_approval_messages,
                chat_approval_messages.c.approval_id,
                "ap-decided",
            )
            == 0
        )
    finally:
        await engine.dispose()

    # A second pass finds nothing more to delete.
    assert await args.handler(args, settings) == 0
    assert '"threads_deleted": 0' in capsys.readouterr().out


async def test_prune_threads_uses_the_injected_clock(
    database_url: str, world: dict[str, str]
) -> None:
    engine = create_engine(database_url)
    try:
        async with open_checkpointer(database_url) as saver:
            # 200 days ago nothing was older than 30 days.
            early = await prune_threads(
                engine, saver, older_than=timedelta(days=30), now=NOW - timedelta(days=200)
            )
            assert early.deleted == []
            # A year from now every thread without an open approval is old.
            # Pages of two: candidates are walked by (created_at, thread_id), kept ones skipped.
            late = await prune_threads(
                engine,
                saver,
                older_than=timedelta(days=30),
                now=NOW + timedelta(days=365),
                batch=2,
            )
    finally:
        await engine.dispose()
    assert sorted(late.deleted) == sorted(
        world[n] for n in ("old_idle", "old_decided", "old_active", "new")
    )
    assert late.kept_pending == [world["old_pending"]]


async def test_audit_retention_is_a_separate_privileged_path(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        for at, thread in ((OLD, "t-old"), (RECENT, "t-new")):
            log = AuditLog(SqlAuditSink(engine), clock=lambda at=at: at)
            await log.record(EventKind.TOOL_CALL, requester="alice", thread_id=thread)
        # The application's path cannot delete: the append-only trigger refuses.
        with pytest.raises(DatabaseError):
            async with engine.begin() as conn:
                await conn.execute(delete(audit_events).where(audit_events.c.at < NOW))
        # The privileged path deletes only what is older than the audit retention.
        removed = await prune_audit(database_url, older_than=timedelta(days=30), now=NOW)
        assert removed == 1
        assert await _rows(engine, audit_events, audit_events.c.thread_id, "t-old") == 0
        assert await _rows(engine, audit_events, audit_events.c.thread_id, "t-new") == 1
        # ... and leaves the trigger in place.
        with pytest.raises(DatabaseError):
            async with engine.begin() as conn:
                await conn.execute(delete(audit_events))
    finally:
        await engine.dispose()


async def test_prune_audit_needs_its_own_setting(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["prune", "--audit"])
    off = Settings(_env_file=None, database_url=sqlite_url)  # type: ignore[call-arg]
    assert await args.handler(args, off) == 2
    assert "audit retention is off" in capsys.readouterr().out
    on = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=sqlite_url,
        retention=RetentionSettings(audit_days=30),
    )
    assert await args.handler(args, on) == 0
    assert '"audit_events_deleted": 0' in capsys.readouterr().out


async def test_opsbot_prune_as_a_process(database_url: str, world: dict[str, str]) -> None:
    env = {**os.environ, "OPSBOT_DATABASE_URL": database_url, "OPSBOT_RETENTION__THREAD_DAYS": "30"}
    proc = await asyncio.create_subprocess_exec(
        *forkserver.command("prune"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["threads_deleted"] == 2
    assert report["kept_pending_approval"] == 1
    state = await _state(database_url, world)
    assert state["old_idle"] == (0, 0)
    assert state["new"] == (1, 1)


async def test_finished_run_jobs_are_pruned_and_live_ones_kept(database_url: str) -> None:
    from infra.storage.schema import run_jobs

    old, recent = NOW - timedelta(days=60), NOW - timedelta(days=1)
    rows = {
        "old-done": ("done", old),
        "old-failed": ("failed", old),
        "recent-done": ("done", recent),
        "old-queued": ("queued", None),
        "old-running": ("running", None),
    }
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            for job_id, (status, finished) in rows.items():
                await conn.execute(
                    insert(run_jobs).values(
                        job_id=job_id,
                        kind="slack_message",
                        user_key="alice",
                        payload={"text": "show ticket PAY-101"},
                        status=status,
                        attempts=1,
                        created_at=old,
                        finished_at=finished,
                    )
                )
        async with open_checkpointer(database_url) as saver:
            report = await prune_threads(engine, saver, older_than=timedelta(days=30), now=NOW)
        assert report.jobs_deleted == 2
        async with engine.connect() as conn:
            left = set((await conn.execute(select(run_jobs.c.job_id))).scalars())
        assert left == {"recent-done", "old-queued", "old-running"}
    finally:
        await engine.dispose()
