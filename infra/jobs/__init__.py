"""Durable runs: every accepted chat message is a job in the database that any instance runs.

A worker claims a job with a lease and renews it while the run goes on; if the process dies,
the lease runs out and another worker (or the same app after a restart) claims the job again.
On the embedded (SQLite, single-process) default, unfinished jobs are recovered at start.

Exceptions::

    JobError
      └── DuplicateJobError   (never raised by enqueue, which returns False instead)

Example::

    queue = SqlJobQueue(engine)
    await queue.enqueue("Ev123", "slack_message", "slack:T1:U1", {"text": "hi"})
    async with JobRunner(queue, handler, RunLimits(global_runs=32, per_user_runs=2)):
        ...
"""

from infra.jobs.inbox import Delivery, JobInbox
from infra.jobs.queue import DuplicateJobError, Job, JobError, JobStatus, SqlJobQueue
from infra.jobs.runner import JobHandler, JobRunner, RunLimits, through_outage
from infra.jobs.spool import SpoolMover, open_ack_engine, open_ack_inbox, spool_url

__all__ = [
    "Delivery",
    "DuplicateJobError",
    "Job",
    "JobError",
    "JobHandler",
    "JobInbox",
    "JobRunner",
    "JobStatus",
    "RunLimits",
    "SpoolMover",
    "SqlJobQueue",
    "open_ack_engine",
    "open_ack_inbox",
    "spool_url",
    "through_outage",
]
