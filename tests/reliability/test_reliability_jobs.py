"""Durable runs: jobs run once across instances, within limits, and survive a killed worker."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from datetime import timedelta

from infra.clock import utc_now
from infra.jobs import Job, JobRunner, JobStatus, RunLimits, SqlJobQueue
from infra.storage import create_engine

BOUND = 60.0


async def test_each_job_runs_once_across_two_instances(database_url: str) -> None:
    engines = [create_engine(database_url), create_engine(database_url)]
    handled: Counter[str] = Counter()
    all_done = asyncio.Event()
    n = 40

    async def handler(job: Job) -> None:
        await asyncio.sleep(0)
        handled[job.job_id] += 1
        if sum(handled.values()) >= n:
            all_done.set()

    try:
        queue_a, queue_b = SqlJobQueue(engines[0]), SqlJobQueue(engines[1])
        async with (
            JobRunner(queue_a, handler, RunLimits(8, 8), poll_seconds=0.02) as a,
            JobRunner(queue_b, handler, RunLimits(8, 8), poll_seconds=0.02) as b,
        ):
            for i in range(n):
                queue = queue_a if i % 2 else queue_b
                assert await queue.enqueue(f"Ev{i}", "test", f"user{i % 5}", {"i": i})
                a.notify()
            # A redelivered event (same id) on either instance is not a second job.
            assert not await queue_a.enqueue("Ev3", "test", "user3", {"i": 3})
            await asyncio.wait_for(all_done.wait(), BOUND)
            await asyncio.wait_for(asyncio.gather(a.idle(), b.idle()), BOUND)
        assert handled == Counter({f"Ev{i}": 1 for i in range(n)})
        for i in range(n):
            assert await queue_a.status(f"Ev{i}") == (JobStatus.DONE, 1)
    finally:
        for engine in engines:
            await engine.dispose()


async def test_per_user_and_global_run_limits_hold(database_url: str) -> None:
    engine = create_engine(database_url)
    running: Counter[str] = Counter()
    peak_user: Counter[str] = Counter()
    peak_total = 0
    finished = 0
    release = asyncio.Event()
    all_done = asyncio.Event()
    jobs = [(f"J{u}{k}", f"user{u}") for u in range(4) for k in range(3)]

    async def handler(job: Job) -> None:
        nonlocal peak_total, finished
        running[job.user_key] += 1
        peak_user[job.user_key] = max(peak_user[job.user_key], running[job.user_key])
        peak_total = max(peak_total, sum(running.values()))
        if sum(running.values()) >= 3:
            release.set()  # the global limit is reached: let runs finish
        await release.wait()
        running[job.user_key] -= 1
        finished += 1
        if finished == len(jobs):
            all_done.set()

    try:
        queue = SqlJobQueue(engine)
        for job_id, user in jobs:
            await queue.enqueue(job_id, "test", user, {})
        async with JobRunner(queue, handler, RunLimits(3, 1), poll_seconds=0.02):
            await asyncio.wait_for(all_done.wait(), BOUND)
        assert peak_total == 3
        assert max(peak_user.values()) == 1
    finally:
        await engine.dispose()


async def test_a_run_in_flight_when_its_worker_is_killed_is_finished_once_after(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    try:
        queue = SqlJobQueue(engine)
        assert await queue.enqueue("EvCRASH", "test", "alice", {"text": "close PAY-104"})
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.reliability.job_worker",
            database_url,
            stdout=asyncio.subprocess.PIPE,
            cwd=os.getcwd(),
        )
        try:
            assert proc.stdout is not None
            line = b""
            while not line.startswith(b"START"):
                line = await asyncio.wait_for(proc.stdout.readline(), BOUND)
                assert line, "the worker exited early"
            assert line.split()[1] == b"EvCRASH"
        finally:
            proc.send_signal(signal.SIGKILL)  # the app dies with the run in flight
            await proc.wait()
        assert await queue.status("EvCRASH") == (JobStatus.RUNNING, 1)

        handled: list[tuple[str, int]] = []
        done = asyncio.Event()

        async def handler(job: Job) -> None:
            handled.append((job.job_id, job.attempts))
            done.set()

        embedded = database_url.startswith("sqlite")
        # Embedded: the restarted app requeues at start. Shared PostgreSQL: another
        # instance takes the job once the dead worker's lease has run out (time injected).
        later = SqlJobQueue(engine, clock=lambda: utc_now() + timedelta(minutes=5))
        async with JobRunner(
            queue if embedded else later,
            handler,
            recover_on_start=embedded,
            poll_seconds=0.02,
        ) as restarted:
            await asyncio.wait_for(done.wait(), BOUND)
            await asyncio.wait_for(restarted.idle(), BOUND)
        assert handled == [("EvCRASH", 2)]
        status = await queue.status("EvCRASH")
        assert status == (JobStatus.DONE, 2)
    finally:
        await engine.dispose()


async def test_a_runner_always_stops_when_its_block_exits(database_url: str) -> None:
    """Leaving the ``async with`` right as a run finishes stops the worker, every time. (On
    Python 3.11, ``asyncio.wait_for`` swallows a cancel that lands once the awaited event is
    set, and a finished run sets the claim loop's wake-up event: the loop then kept polling
    and shutdown hung.)"""
    engine = create_engine(database_url)
    finished = asyncio.Event()

    class SignallingQueue(SqlJobQueue):
        async def finish(self, worker: str, job_id: str, error: str | None = None) -> bool:
            done = await super().finish(worker, job_id, error)
            finished.set()  # the runner wakes its claim loop right after this returns
            return done

    async def handler(job: Job) -> None:
        return None

    try:
        queue = SignallingQueue(engine)
        for i in range(40):
            finished.clear()
            await queue.enqueue(f"stop{i}", "test", "user", {})
            async with asyncio.timeout(BOUND):
                async with JobRunner(queue, handler, poll_seconds=0.01) as runner:
                    runner.notify()
                    await finished.wait()
    finally:
        await engine.dispose()


async def test_a_job_failing_on_a_connection_error_goes_back_in_the_queue(
    database_url: str,
) -> None:
    """A connection error is not the job's fault: the job is queued again (not done, not
    failed) with back-off, and runs again; a real error fails it at once; so does a
    connection error on its last attempt."""
    import psycopg
    import sqlalchemy.exc

    engine = create_engine(database_url)
    attempts: Counter[str] = Counter()
    settled = asyncio.Event()
    dead = sqlalchemy.exc.OperationalError(
        "SELECT 1", {}, psycopg.OperationalError("server closed the connection unexpectedly")
    )

    async def handler(job: Job) -> None:
        attempts[job.job_id] += 1
        try:
            if job.job_id == "flaky" and job.attempts == 1:
                raise dead  # the database restarted under this run
            if job.job_id == "broken":
                raise ValueError("a bug, not the connection")
            if job.job_id == "down":
                raise psycopg.OperationalError("connection refused")
        finally:
            if sum(attempts.values()) >= 5:
                settled.set()

    try:
        clock_offset = timedelta()
        queue = SqlJobQueue(engine, clock=lambda: utc_now() + clock_offset, max_attempts=2)
        for job_id in ("flaky", "broken", "down"):
            await queue.enqueue(job_id, "test", job_id, {})
        async with JobRunner(queue, handler, poll_seconds=0.02) as runner:
            async with asyncio.timeout(BOUND):
                while await queue.status("flaky") != (JobStatus.QUEUED, 1):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            # Queued with a "not before": not claimed again at once.
            await asyncio.sleep(0.2)
            assert await queue.status("flaky") == (JobStatus.QUEUED, 1)
            assert attempts["flaky"] == 1
            clock_offset = timedelta(minutes=5)  # its back-off has passed
            runner.notify()
            await asyncio.wait_for(settled.wait(), BOUND)
            await asyncio.wait_for(runner.idle(), BOUND)
        assert await queue.status("flaky") == (JobStatus.DONE, 2)
        assert await queue.status("broken") == (JobStatus.FAILED, 1)
        assert await queue.status("down") == (JobStatus.FAILED, 2)  # out of attempts
        assert attempts == Counter({"flaky": 2, "broken": 1, "down": 2})
    finally:
        await engine.dispose()


def test_connection_errors_are_told_apart_from_real_failures() -> None:
    import sqlite3

    import psycopg
    import psycopg_pool
    import sqlalchemy.exc

    from infra.storage import is_connection_error

    def wrapped(orig: BaseException) -> sqlalchemy.exc.DBAPIError:
        return sqlalchemy.exc.DBAPIError.instance("SELECT 1", {}, orig, Exception)

    assert is_connection_error(psycopg.OperationalError("connection refused"))
    assert is_connection_error(psycopg.errors.AdminShutdown("terminating connection"))
    assert is_connection_error(psycopg_pool.PoolTimeout("couldn't get a connection"))
    assert is_connection_error(wrapped(psycopg.OperationalError("gone")))
    assert is_connection_error(sqlite3.OperationalError("database is locked"))
    outer = RuntimeError("the store failed")
    outer.__cause__ = psycopg.InterfaceError("the connection is closed")
    assert is_connection_error(outer)
    assert is_connection_error(ExceptionGroup("run", [ValueError(), psycopg.OperationalError()]))

    assert not is_connection_error(ValueError("a bug"))
    assert not is_connection_error(psycopg.errors.UndefinedTable("relation does not exist"))
    assert not is_connection_error(wrapped(psycopg.errors.UniqueViolation("duplicate key")))
    assert not is_connection_error(sqlite3.OperationalError("no such table: run_jobs"))


async def test_a_worker_runs_only_its_own_kinds_of_job(database_url: str) -> None:
    """``opsbot serve`` runs a Slack and a Teams worker on one queue table: each takes only
    its own platform's jobs, and a start-up recovery requeues only its own."""
    engine = create_engine(database_url)
    seen: dict[str, list[str]] = {"slack": [], "teams": []}
    done = asyncio.Event()

    def handler_for(platform: str):  # type: ignore[no-untyped-def]
        async def handler(job: Job) -> None:
            seen[platform].append(job.kind)
            if sum(len(v) for v in seen.values()) >= 6:
                done.set()

        return handler

    try:
        queue = SqlJobQueue(engine)
        # A Teams job left running by a dead process: the Slack worker's recovery leaves it.
        assert await queue.enqueue("T-old", "teams_message", "u0", {})
        assert [
            j.job_id
            for j in await queue.claim("dead", lease=timedelta(hours=1), limit=1, per_user=1)
        ] == ["T-old"]
        assert await queue.release_all_running(("slack_message",)) == 0
        async with (
            JobRunner(
                queue, handler_for("slack"), poll_seconds=0.02, kinds=("slack_message",)
            ) as slack,
            JobRunner(
                queue, handler_for("teams"), poll_seconds=0.02, kinds=("teams_message",)
            ) as teams,
        ):
            for i in range(3):
                assert await queue.enqueue(f"S{i}", "slack_message", f"u{i}", {})
                assert await queue.enqueue(f"T{i}", "teams_message", f"u{i}", {})
            await asyncio.wait_for(done.wait(), BOUND)
            await asyncio.wait_for(asyncio.gather(slack.idle(), teams.idle()), BOUND)
        assert seen == {"slack": ["slack_message"] * 3, "teams": ["teams_message"] * 3}
        assert await queue.release_all_running(("teams_message",)) == 1  # T-old, still held
    finally:
        await engine.dispose()
