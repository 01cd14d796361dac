"""The Slack app killed (SIGKILL) with a run in flight: after a restart the run completes and
the message is answered exactly once, in place of the same placeholder."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select

from opsbot.jobs import JobStatus
from opsbot.storage import create_engine
from opsbot.storage.schema import run_jobs
from tests.fixtures.slack import FakeSlack, SlackSender, mention

BOUND = 60.0
CHANNEL, TS = "C0GENERAL", "1700000500.000100"


@contextlib.asynccontextmanager
async def app_process(
    url: str, fake: FakeSlack, run_delay: float
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.reliability.slack_app_process",
        url,
        fake.url,
        str(run_delay),
        stdout=asyncio.subprocess.PIPE,
        cwd=os.getcwd(),
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), BOUND)
        assert line.startswith(b"PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}", proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def job_statuses(url: str) -> list[tuple[str, int]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(run_jobs.c.status, run_jobs.c.attempts))).all()
        return [(str(s), int(a)) for s, a in rows]
    finally:
        await engine.dispose()


async def until(condition: object, what: str) -> None:
    async def poll() -> None:
        # The state lives in another process's database rows: there is no event to await.
        while not await condition():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), BOUND)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_app_killed_with_a_run_in_flight_answers_once_after_restart(
    fake_slack: FakeSlack, sqlite_url: str
) -> None:
    async with app_process(sqlite_url, fake_slack, run_delay=600) as (app_url, proc):
        status, _ = await SlackSender(app_url).post_event(
            mention("U0001", "what is PAY-1?", channel=CHANNEL, ts=TS), event_id="EvCRASH1"
        )
        assert status == 200

        async def running() -> bool:
            return await job_statuses(sqlite_url) == [(JobStatus.RUNNING.value, 1)]

        await until(running, "the run to be in flight")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    [placeholder] = fake_slack.thread(CHANNEL, TS)
    assert fake_slack.calls_to("chat.update") == []

    async with app_process(sqlite_url, fake_slack, run_delay=0) as (app_url, _proc):
        await fake_slack.wait_for("chat.update", 1, wait=BOUND)
        # Slack retries the same event to the restarted app: it is not run again.
        status, _ = await SlackSender(app_url).post_event(
            mention("U0001", "what is PAY-1?", channel=CHANNEL, ts=TS),
            event_id="EvCRASH1",
            retry_num=1,
        )
        assert status == 200

        async def finished() -> bool:
            return await job_statuses(sqlite_url) == [(JobStatus.DONE.value, 2)]

        await until(finished, "the recovered run to finish")
        await fake_slack.settle(quiet=0.3, limit=BOUND)
    [reply] = fake_slack.thread(CHANNEL, TS)
    assert reply["ts"] == placeholder["ts"]
    assert "PAY-1 is open" in reply["text"]
    [update] = fake_slack.calls_to("chat.update")
    assert update["ts"] == placeholder["ts"]


@pytest.mark.postgres
async def test_two_app_processes_on_postgres_answer_every_message_once(
    fake_slack: FakeSlack, postgres_url: str
) -> None:
    """Deliveries land on either process, Slack's retries on the other one: every message
    is answered exactly once, whichever worker ran it."""
    n = 12
    async with (
        app_process(postgres_url, fake_slack, run_delay=0.05) as (url_a, _a),
        app_process(postgres_url, fake_slack, run_delay=0.05) as (url_b, _b),
    ):
        senders = [SlackSender(url_a), SlackSender(url_b)]
        events = [
            (f"EvTWO{i}", mention("U0001", f"q{i}", channel=CHANNEL, ts=f"1700000600.{i:06d}"))
            for i in range(n)
        ]
        first = await asyncio.gather(
            *(senders[i % 2].post_event(ev, event_id=eid) for i, (eid, ev) in enumerate(events))
        )
        retries = await asyncio.gather(
            *(
                senders[(i + 1) % 2].post_event(ev, event_id=eid, retry_num=1)
                for i, (eid, ev) in enumerate(events)
            )
        )
        assert {status for status, _ in [*first, *retries]} == {200}
        await fake_slack.wait_for("chat.update", n, wait=BOUND)
        await fake_slack.settle(quiet=0.3, limit=BOUND)
    for i, (_eid, event) in enumerate(events):
        [reply] = fake_slack.thread(CHANNEL, event["ts"])
        assert f"You asked: q{i}" in reply["text"]
    assert len(fake_slack.calls_to("chat.update")) == n
    assert sorted(await job_statuses(postgres_url)) == [(JobStatus.DONE.value, 1)] * n
