"""Durable conversations: an accepted Slack message becomes a job any instance runs.

``DurableSlackAdapter.accept`` stores every accepted message as a job *before* Slack is
acknowledged (the accept middleware and the ``/ops`` listener call it ahead of the ack), so an
acknowledged message survives a crash at any point after. A ``JobRunner`` on any instance
runs the job with ``run_job``: it posts the working indicator and records it in the job, so
a run retried after a crash replaces the same placeholder: one answer per message, however
many attempts it took.

Example::

    adapter = DurableSlackAdapter(config, assistant, client, messages, SqlJobQueue(engine))
    app = build_app(config, assistant, engine, client=client, adapter=adapter)
    async with JobRunner(adapter.queue, adapter.run_job, limits) as runner:
        adapter.runner = runner
        ...
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Unpack

from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.jobs import WorkerOptions, message_worker
from bot.slack.adapter import SlackAdapter
from bot.slack.app import SlackBot, open_bot
from bot.slack.config import SlackBotConfig
from bot.slack.core import AssistantPort
from bot.slack.incoming import Progress, UserMessage
from bot.slack.store import SqlApprovalMessages
from infra.clock import Clock, utc_now
from infra.faults import crash_point
from infra.jobs import Delivery, Job, JobRunner, SqlJobQueue, through_outage

log = logging.getLogger(__name__)
JOB_KIND = "slack_message"


def message_job(message: UserMessage, delivery_id: str) -> Delivery:
    """The job a message becomes (the ack path's inbox and ``accept`` both store this). The
    job id is the delivery's, so a redelivery that reaches any instance is recognised."""
    return Delivery(
        job_id=f"slack-{delivery_id or secrets.token_urlsafe(12)}",
        kind=JOB_KIND,
        user_key=message.user_key,
        payload={"message": message.to_payload(), "progress": Progress().to_payload()},
        event_id=delivery_id or None,
        platform="slack",
    )


@dataclass(eq=False, repr=False)
class DurableSlackAdapter(SlackAdapter):
    queue: SqlJobQueue
    runner: JobRunner | None = field(default=None, init=False)

    async def accept(self, message: UserMessage, delivery_id: str) -> bool:
        """Persist the message as a job before Slack is acknowledged (if this raises, Slack
        gets no ack and delivers again). The job id is the delivery's, so a redelivery that
        reaches any instance is recognised here."""
        job = message_job(message, delivery_id)
        return await self.queue.enqueue(job.job_id, job.kind, job.user_key, job.payload)

    async def converse(self, message: UserMessage) -> None:
        """After the ack: the job is stored already; wake this instance's worker for it."""
        if self.runner is not None:
            self.runner.notify()

    async def run_job(self, job: Job) -> None:
        """Run one accepted message (on whichever instance claimed it) and answer it."""
        crash_point("job_start")
        message = UserMessage.from_payload(job.payload["message"])
        progress = Progress.from_payload(job.payload.get("progress"))

        async def record(step: Progress) -> None:
            payload = {**job.payload, "progress": step.to_payload()}
            # Through a database outage: a placeholder posted but not recorded would be
            # posted again by the retry, leaving the first one behind.
            if not await through_outage(self.queue.update_payload, job, payload):
                log.warning("job %s was taken over; its progress was not saved", job.job_id)

        # A database connection error puts the job back in the queue (the runner retries it
        # from its recorded progress); on its last attempt the user is told it failed.
        await self.answer(message, progress, record, retry_on_connection_error=not job.last_attempt)


@contextlib.asynccontextmanager
async def open_durable_bot(
    config: SlackBotConfig,
    assistant: AssistantPort,
    engine: AsyncEngine,
    *,
    clock: Clock = utc_now,
    socket_mode: bool = False,
    **worker: Unpack[WorkerOptions],
) -> AsyncIterator[SlackBot]:
    """Like ``open_bot``, with durable runs and this instance's worker running them."""
    queue = SqlJobQueue(engine, clock)
    made: list[DurableSlackAdapter] = []

    def make_adapter(client: AsyncWebClient, messages: SqlApprovalMessages) -> SlackAdapter:
        made.append(DurableSlackAdapter(config, assistant, client, messages, queue))
        return made[-1]

    async with open_bot(
        config, assistant, engine, clock=clock, socket_mode=socket_mode, make_adapter=make_adapter
    ) as bot:
        adapter = made[-1]
        async with message_worker(adapter, queue, JOB_KIND, engine, worker):
            yield SlackBot(bot.app, adapter)
