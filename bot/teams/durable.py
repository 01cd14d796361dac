"""Durable conversations: an accepted Teams message becomes a job any instance runs.

``DurableTeamsAdapter.accept`` stores the message as a job (id = the delivery's key) *before*
Teams gets its 202, then claims the delivery in the shared ``processed_events``; a
``JobRunner`` on any instance answers it with ``run_job``. A crash after the 202 loses
nothing: the job is taken over when its lease runs out (PostgreSQL) or requeued at start
(SQLite). A retried run may post the typing indicator again but answers once per attempt
that reaches the end, like Slack's.

Example::

    async with open_durable_teams_bot(config, assistant, engine) as bot:
        ...
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Unpack

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.jobs import WorkerOptions, message_worker
from bot.teams.adapter import TeamsAdapter, is_stop
from bot.teams.app import TeamsBot, open_teams_bot
from bot.teams.config import TeamsBotConfig
from bot.teams.core import AssistantPort
from bot.teams.incoming import TeamsMessage
from infra.clock import Clock, utc_now
from infra.jobs import Job, JobRunner, SqlJobQueue

log = logging.getLogger(__name__)
JOB_KIND = "teams_message"


class DurableTeamsAdapter(TeamsAdapter):
    def __init__(self, *args: Any, queue: SqlJobQueue, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = queue
        self.runner: JobRunner | None = None

    async def accept(self, message: TeamsMessage) -> bool:
        """Store the message as a job before the 202 (if this raises, Teams gets a 503 and
        nothing is marked seen). The job id is the delivery's, so a redelivery reaching any
        instance is recognised here; the delivery is then recorded beside Slack's. A "stop"
        is no job: it must not wait for the run it stops."""
        if is_stop(message.text):
            return await self.accept_stop(message)
        job_id = f"teams-{message.delivery_id}"
        first = await self.queue.enqueue(
            job_id, JOB_KIND, message.user_key, {"message": message.to_payload()}
        )
        if not first:
            return False
        await self.processed.claim(message.delivery_id)
        if self.runner is not None:
            self.runner.notify()
        return True

    async def idle(self) -> None:
        """Wait for this instance's runs to finish (tests, bench)."""
        await super().idle()
        if self.runner is not None:
            await self.runner.idle()

    async def run_job(self, job: Job) -> None:
        """Answer one accepted message, on whichever instance claimed it. A database
        connection error puts the job back in the queue; on its last attempt the person is
        told it failed."""
        message = TeamsMessage.from_payload(job.payload["message"])
        await self.answer(message, retry_on_connection_error=not job.last_attempt)


@contextlib.asynccontextmanager
async def open_durable_teams_bot(
    config: TeamsBotConfig,
    assistant: AssistantPort,
    engine: AsyncEngine,
    *,
    clock: Clock = utc_now,
    **worker: Unpack[WorkerOptions],
) -> AsyncIterator[TeamsBot]:
    """Like ``open_teams_bot``, with durable runs and this instance's worker running them."""
    queue = SqlJobQueue(engine, clock)
    async with open_teams_bot(
        config, assistant, engine, clock=clock, adapter_class=DurableTeamsAdapter, queue=queue
    ) as bot:
        adapter = bot.adapter
        assert isinstance(adapter, DurableTeamsAdapter)
        async with message_worker(adapter, queue, JOB_KIND, engine, worker):
            yield bot
