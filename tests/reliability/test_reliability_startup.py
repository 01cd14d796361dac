"""Start-up against a database nobody has migrated: three ``opsbot slack`` processes started
at once on a fresh PostgreSQL database all come up (none crashes in the store set-up), report
unready with what to do, say it once, and become ready when ``opsbot migrate`` (three at
once, too) has run — without a restart. And the job loop on an un-migrated database backs
off instead of spinning."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from infra.jobs import Job, JobRunner, JobStatus, SqlJobQueue
from infra.storage import create_engine, head_revision, migrate
from mcp_servers import ReferenceServers
from testing.identity import RunningIdp
from testing.slack import FakeSlack
from tests.reliability.opsbot_process import app_env, opsbot_migrate, opsbot_slacks

BOUND = 120.0  # a loaded CI machine imports the app slowly: three at once
# The module, not the ``migrate`` function that ``infra.storage`` exports under its name.
migrate_module = importlib.import_module("infra.storage.migrate")
SCHEMA_LINE = "database schema is at revision none, expected {head}: run `opsbot migrate`"


@pytest.fixture(autouse=True)
def _nothing_said_yet() -> Iterator[None]:
    """What a process has said about its schema is per process: start each test afresh."""
    migrate_module._said.clear()
    yield
    migrate_module._said.clear()


def _url(fresh_postgres_database: str, postgres_server_url: str) -> str:
    return (
        make_url(postgres_server_url)
        .set(database=fresh_postgres_database)
        .render_as_string(hide_password=False)
    )


async def _until_ready(app: object, bound: float) -> str:
    async def poll() -> str:
        while True:
            status, body = await app.readyz()  # type: ignore[attr-defined]
            if status == 200:
                return str(body)
            await asyncio.sleep(0.2)

    return await asyncio.wait_for(poll(), bound)


@pytest.mark.postgres
@pytest.mark.timeout(600)
async def test_three_instances_started_at_once_on_a_fresh_database(
    fresh_postgres_database: str,
    postgres_server_url: str,
    fake_slack: FakeSlack,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    tmp_path: Path,
) -> None:
    url = _url(fresh_postgres_database, postgres_server_url)
    env = app_env(url, tmp_path, fake_slack, dev_idp, reference_servers)
    expected = SCHEMA_LINE.format(head=head_revision())
    async with opsbot_slacks(env, 3, bound=BOUND, forked=True) as apps:
        for app in apps:
            status, body = await app.readyz()
            assert status == 503, body
            assert json.loads(body)["checks"]["database"]["detail"] == expected
        # Probed like a load balancer would, for a while: still one line, and the job loop
        # does not fill the log either.
        for _ in range(10):
            await asyncio.gather(*(app.readyz() for app in apps))
        await asyncio.sleep(3.0)  # wall time is what a spinning loop would fill
        for app in apps:
            assert app.proc.returncode is None, "\n".join(app.lines[-30:])
            assert app.count("database schema is at revision") == 1, "\n".join(app.lines)
            assert app.count("run_jobs") == 0, "\n".join(app.lines)
            assert len(app.lines) < 40, "\n".join(app.lines)  # not thousands

        # The release step, run by three deploys at once: they take turns.
        results = await asyncio.gather(
            *(opsbot_migrate(env, bound=BOUND, forked=True) for _ in range(3))
        )
        for code, out in results:
            assert code == 0, out
        assert sum("migrated database from empty" in out for _, out in results) == 1, results

        for app in apps:
            body = await _until_ready(app, BOUND)
            assert json.loads(body)["checks"]["database"] == {"ok": True}
            assert app.proc.returncode is None
            assert app.count("Traceback") == 0, "\n".join(app.lines)


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_job_loop_on_an_unmigrated_database_backs_off_and_says_why_once(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'fresh.db'}"
    else:
        url = _url(
            request.getfixturevalue("fresh_postgres_database"),
            request.getfixturevalue("postgres_server_url"),
        )
    engine = create_engine(url)
    ran: list[str] = []
    done = asyncio.Event()

    async def handler(job: Job) -> None:
        ran.append(job.job_id)
        done.set()

    caplog.set_level(logging.INFO)
    try:
        queue = SqlJobQueue(engine)
        poll, window = 0.05, 3.0
        async with JobRunner(
            queue, handler, poll_seconds=poll, max_backoff=1.0, recover_on_start=True
        ) as runner:
            await asyncio.sleep(window)  # how often it tries in this time is the measure
            # Without back-off it would claim window / poll = 60 times; with it, a handful.
            assert runner.claim_attempts <= 8, runner.claim_attempts
            said = [r.getMessage() for r in caplog.records if r.name.startswith("infra.")]
            expected = SCHEMA_LINE.format(head=head_revision())
            assert said == [expected], said

            await migrate(engine)
            assert await queue.enqueue("Ev1", "test", "alice", {})
            runner.notify()
            await asyncio.wait_for(done.wait(), BOUND)
            await asyncio.wait_for(runner.idle(), BOUND)
        assert ran == ["Ev1"]
        assert await queue.status("Ev1") == (JobStatus.DONE, 1)
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_store_setup_of_instances_starting_together_takes_turns(
    fresh_postgres_database: str, postgres_server_url: str
) -> None:
    """The checkpointer's and user-memory store's set-up, and the migrations, of several
    instances overlapping on a fresh database: none fails (without the advisory lock, two
    ``CREATE TABLE IF NOT EXISTS`` or migration-version inserts collide)."""
    from agent_core.checkpointer import open_checkpointer
    from memory.store import open_memory_store

    url = _url(fresh_postgres_database, postgres_server_url)

    async def instance() -> None:
        engine = create_engine(url)
        try:
            await migrate(engine)
        finally:
            await engine.dispose()
        async with open_checkpointer(url, pool_size=2), open_memory_store(url):
            pass

    for _ in range(2):  # a fresh database, then one already set up
        await asyncio.wait_for(asyncio.gather(*(instance() for _ in range(4))), BOUND)
