"""A worker process for crash tests: ``python -m tests.reliability.job_worker DATABASE_URL``.

Claims jobs and prints ``START <job_id>`` for each, then never finishes them: the test
SIGKILLs the process with the run in flight.
"""

from __future__ import annotations

import asyncio
import sys

from infra.jobs import Job, JobRunner, RunLimits, SqlJobQueue
from infra.storage import create_engine


async def main(url: str) -> None:
    engine = create_engine(url)

    async def handler(job: Job) -> None:
        print(f"START {job.job_id}", flush=True)
        await asyncio.Event().wait()

    async with JobRunner(SqlJobQueue(engine), handler, RunLimits(4, 4), poll_seconds=0.05):
        print("READY", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
