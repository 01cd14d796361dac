"""Chaos: PostgreSQL stopped for 10 s under load. The real ``opsbot slack`` process (durable
runs, the offline demo model, the in-process broker) on a PostgreSQL cluster of the test's own
(``pg_ctl``), with the dev IdP, the reference MCP servers and the fake Slack. Conversations
arrive before, during and after the outage; Slack's redelivery is played as Slack does it
(the same event again until it gets a 200). Every conversation is answered exactly once, and
never with an error: runs that hit the outage went back in the queue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select

from infra.jobs import JobStatus
from infra.storage import create_engine, migrate
from infra.storage.schema import run_jobs
from mcp_servers import ReferenceServers
from testing.identity import RunningIdp
from testing.slack import FakeSlack, SlackSender, mention
from tests.bot.test_slack_events import _texts
from tests.reliability.opsbot_process import app_env, opsbot_slack
from tests.reliability.pg_cluster import PgCluster, throwaway_cluster

BOUND = 180.0
OUTAGE_SECONDS = 10.0
USERS = {"U0ALICE": "alice", "U0BOB": "bob", "U0CAROL": "carol"}
# Each user asks about a ticket of their own team (carol is on platform), so every answer
# carries its ticket.
TICKETS = ["PAY-101", "PAY-102", "PLAT-201"]
ERRORS = ("Something went wrong", "could not complete", "not completed", "try again")


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    with throwaway_cluster() as running:
        yield running


async def deliver(sender: SlackSender, event: dict[str, Any], event_id: str) -> int:
    """Post an event until it is acknowledged, as Slack redelivers: the same event id with
    ``X-Slack-Retry-Num``. Returns how many deliveries it took."""
    deadline = time.monotonic() + BOUND
    attempt = 0
    while True:
        try:
            status, _ = await sender.post_event(event, event_id=event_id, retry_num=attempt or None)
        except aiohttp.ClientError:
            status = 0
        if status == 200:
            return attempt + 1
        assert time.monotonic() < deadline, f"{event_id} was never acknowledged"
        attempt += 1
        await asyncio.sleep(1.0)


def conversation(i: int, phase: str) -> tuple[str, dict[str, Any], str]:
    user = list(USERS)[i % len(USERS)]
    ticket = TICKETS[i % len(TICKETS)]
    ts = f"1700001000.{i:06d}"
    return f"Ev{phase}{i}", mention(user, f"show ticket {ticket}", ts=ts), ticket


async def answered(fake_slack: FakeSlack, event: dict[str, Any]) -> bool:
    """The thread holds a final message (the working indicator replaced by the answer)."""
    return any(
        any(ticket in _texts(m.get("blocks") or []) for ticket in TICKETS)
        or any(e in str(m.get("text")) for e in ERRORS)
        for m in fake_slack.thread(event["channel"], event["ts"])
    )


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_postgres_stopped_for_10s_under_load_every_conversation_answered_once(
    cluster: PgCluster,
    fake_slack: FakeSlack,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    tmp_path: Path,
) -> None:
    url = await asyncio.to_thread(cluster.create_database, "chaos")
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()
    env = app_env(url, tmp_path, fake_slack, dev_idp, reference_servers)
    async with (
        opsbot_slack(env, bound=BOUND) as app,
        aiohttp.ClientSession() as session,
    ):
        sender = SlackSender(app.url, session=session)
        for user, name in USERS.items():
            await app.link(sender, user, name)

        # Enough before the outage that runs are queued and in flight when it starts (two
        # runs per user at a time).
        before = [conversation(i, "before") for i in range(30)]
        during = [conversation(i, "during") for i in range(30, 38)]
        after = [conversation(i, "after") for i in range(38, 46)]
        everything = [*before, *during, *after]

        # Load, and the database goes away with runs in flight (their working indicators are
        # up) and more queued behind them.
        sending = asyncio.gather(*(deliver(sender, ev, eid) for eid, ev, _ in before))
        await fake_slack.wait_for("chat.postMessage", 6, wait=BOUND)
        await asyncio.to_thread(cluster.stop)
        stopped_at = time.monotonic()
        # Conversations arriving while it is down: not acknowledged until it is back.
        arriving = asyncio.gather(*(deliver(sender, ev, eid) for eid, ev, _ in during))
        await asyncio.sleep(OUTAGE_SECONDS - (time.monotonic() - stopped_at))
        await asyncio.to_thread(cluster.start)
        recovered_at = time.monotonic()
        await asyncio.wait_for(asyncio.gather(sending, arriving), BOUND)
        await asyncio.gather(*(deliver(sender, ev, eid) for eid, ev, _ in after))

        async def all_answered() -> None:
            # The answers are another process's Web API calls: polled.
            while not all([await answered(fake_slack, ev) for _, ev, _ in everything]):  # noqa: ASYNC110
                await asyncio.sleep(0.2)

        await asyncio.wait_for(all_answered(), BOUND)
        await fake_slack.settle(quiet=1.0, limit=BOUND)
        assert app.proc.returncode is None
        retried = app.count("database connection error")
        recovery = time.monotonic() - recovered_at

    for eid, event, ticket in everything:
        thread = fake_slack.thread(event["channel"], event["ts"])
        assert len(thread) == 1, (eid, thread)  # answered once: one message, no stray one
        text = _texts(thread[0].get("blocks") or []) + str(thread[0].get("text"))
        assert not any(e in text for e in ERRORS), (eid, text)
        assert ticket in text, (eid, text)

    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            c = run_jobs.c
            rows = (await conn.execute(select(c.job_id, c.status, c.attempts))).all()
    finally:
        await engine.dispose()
    assert sorted(r[0] for r in rows) == sorted(f"slack-{eid}" for eid, _, _ in everything)
    assert {r[1] for r in rows} == {JobStatus.DONE.value}
    # What the outage did (printed for the report; -s shows it).
    attempts = sorted(int(r[2]) for r in rows)
    print(
        f"\nchaos: all answered {recovery:.1f} s after PostgreSQL restarted; runs retried "
        f"after a connection error: {retried}; max attempts of a job: {attempts[-1]}"
    )
