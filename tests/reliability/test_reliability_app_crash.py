"""The Slack app killed (SIGKILL) with a run in flight: after a restart the run completes and
the message is answered exactly once, in place of the same placeholder."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import select

from infra.jobs import JobStatus
from infra.storage import create_engine
from infra.storage.schema import run_jobs
from testing.slack import FakeSlack, SlackSender, mention
from tests.reliability.children import ServingChild, serving_child

BOUND = 60.0
CHANNEL, TS = "C0GENERAL", "1700000500.000100"


@contextlib.asynccontextmanager
async def app_process(
    url: str, fake: FakeSlack, run_delay: float, *, stall: bool = False, front: bool = False
) -> AsyncIterator[tuple[str, ServingChild]]:
    """The app as a process of its own, forked from the fork server (it imports nothing the
    server has not; a start from scratch was ~2-3 s of CPU, eight per file); the tests
    SIGKILL that process itself, from outside, as a crash would."""
    flags = [*(["stall"] if stall else []), *(["front"] if front else [])]
    args = [url, fake.url, str(run_delay), *flags]
    module = "tests.reliability.slack_app_process"
    async with serving_child(module, *args, bound=BOUND, forked=True) as child:
        yield f"http://127.0.0.1:{child.port}", child


async def job_rows(url: str) -> list[tuple[str, int, dict[str, Any]]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            c = run_jobs.c
            rows = (await conn.execute(select(c.status, c.attempts, c.payload))).all()
        return [(str(s), int(a), dict(p)) for s, a, p in rows]
    finally:
        await engine.dispose()


async def job_statuses(url: str) -> list[tuple[str, int]]:
    return [(s, a) for s, a, _ in await job_rows(url)]


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
    async with app_process(sqlite_url, fake_slack, run_delay=600) as (app_url, app):
        status, _ = await SlackSender(app_url).post_event(
            mention("U0001", "what is PAY-1?", channel=CHANNEL, ts=TS), event_id="EvCRASH1"
        )
        assert status == 200

        async def running() -> bool:
            # In flight once its placeholder is recorded in the job (a crash between posting
            # and recording it would leave a second placeholder: a window of one UPDATE).
            jobs = await job_rows(sqlite_url)
            return [(s, a) for s, a, _ in jobs] == [(JobStatus.RUNNING.value, 1)] and bool(
                jobs[0][2].get("progress", {}).get("placeholder_ts")
            )

        await until(running, "the run to be in flight")
        assert await app.kill() == -signal.SIGKILL
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


@pytest.mark.parametrize("front", [False, True], ids=["bolt", "ack_front"])
async def test_app_killed_right_after_acknowledging_a_message_answers_it_after_restart(
    fake_slack: FakeSlack, sqlite_url: str, front: bool
) -> None:
    """Slack got its 200, so it will never deliver the message again: the message must
    already be stored when the ack goes out, not in the listener that runs after it. On
    the ack front it is in the spool file when the process dies (nothing moved it yet)."""
    stalled = app_process(sqlite_url, fake_slack, run_delay=0, stall=True, front=front)
    async with stalled as (app_url, app):
        status, _ = await SlackSender(app_url).post_event(
            mention("U0001", "what is PAY-2?", channel=CHANNEL, ts=TS), event_id="EvACKED"
        )
        assert status == 200
        assert await app.kill() == -signal.SIGKILL
    assert fake_slack.thread(CHANNEL, TS) == []
    if front:  # acked from the spool: run_jobs has not seen it
        assert await job_statuses(sqlite_url) == []

    async with app_process(sqlite_url, fake_slack, run_delay=0) as (_app_url, _proc):

        async def finished() -> bool:
            return await job_statuses(sqlite_url) == [(JobStatus.DONE.value, 1)]

        await until(finished, "the stored message to be answered")
        await fake_slack.settle(quiet=0.3, limit=BOUND)
    [reply] = fake_slack.thread(CHANNEL, TS)
    assert "You asked: what is PAY-2?" in reply["text"]


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
