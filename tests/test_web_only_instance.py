"""An instance that takes no runs (``OPSBOT_RUNS__GLOBAL_RUNS=0``): a web instance that only
acknowledges and stores messages while workers run the agents. It runs no job, and on the
embedded SQLite file it does not requeue the runs its worker has in flight."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.jobs import WorkerOptions, message_worker
from infra.jobs import Job, JobRunner, JobStatus, RunLimits, SqlJobQueue
from infra.settings import Settings
from infra.storage import create_engine

KIND = "slack_message"


class Recorder:
    """A durable adapter that records the jobs it was given."""

    def __init__(self) -> None:
        self.runner: JobRunner | None = None
        self.ran: list[str] = []
        self.ran_one = asyncio.Event()

    async def run_job(self, job: Job) -> None:
        self.ran.append(job.job_id)
        self.ran_one.set()


def test_zero_runs_is_a_valid_setting_only_with_durable_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPSBOT_RUNS__GLOBAL_RUNS", "0")
    assert Settings(_env_file=None).runs.global_runs == 0
    # In-process runs run where they were accepted: nobody would answer these.
    monkeypatch.setenv("OPSBOT_RUNS__DURABLE", "false")
    with pytest.raises(ValidationError, match="needs durable=true"):
        Settings(_env_file=None)
    monkeypatch.setenv("OPSBOT_RUNS__DURABLE", "true")
    monkeypatch.setenv("OPSBOT_RUNS__GLOBAL_RUNS", "-1")
    with pytest.raises(ValidationError):
        Settings(_env_file=None)


async def test_a_web_instance_runs_nothing_and_leaves_its_workers_runs_alone(
    sqlite_url: str,
) -> None:
    engine: AsyncEngine = create_engine(sqlite_url)
    try:
        queue = SqlJobQueue(engine)
        # The worker (another process on this file) has one run in flight, and one queued.
        assert await queue.enqueue("slack-Ev1", KIND, "slack:T1:U1", {"text": "q1"})
        [taken] = await queue.claim("w-worker", lease=timedelta(minutes=5), limit=1, per_user=2)
        assert await queue.enqueue("slack-Ev2", KIND, "slack:T1:U2", {"text": "q2"})

        web = Recorder()
        options: WorkerOptions = {"limits": RunLimits(global_runs=0), "poll_seconds": 0.01}
        async with message_worker(web, queue, KIND, engine, options) as runner:
            await asyncio.sleep(0.3)  # some thirty polls
        assert runner.claim_attempts >= 3
        assert web.ran == []
        # Still the worker's, still running: the web instance did not "recover" it at start.
        assert await queue.status(taken.job_id) == (JobStatus.RUNNING, 1)
        assert await queue.status("slack-Ev2") == (JobStatus.QUEUED, 0)

        # A worker with runs does take the queued one.
        worker = Recorder()
        options = {"limits": RunLimits(global_runs=4), "poll_seconds": 0.01}
        async with message_worker(worker, queue, KIND, engine, options) as runner:
            await asyncio.wait_for(worker.ran_one.wait(), 30)
            await runner.idle()
        assert "slack-Ev2" in worker.ran
    finally:
        await engine.dispose()
