"""Cross-platform approval notices (``assistant.fanout``) on SQLite and PostgreSQL: who is
told, once each across workers, retried when the platform refuses, redelivered after a crash."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from assistant.fanout import MAX_ATTEMPTS, ApprovalFanout, SqlApprovalNotices
from assistant.types import (
    Answer,
    Answered,
    ApprovalNotice,
    Decided,
    PlatformRef,
    Refused,
)
from infra.storage import create_engine
from infra.storage.schema import approval_notices, chat_approval_messages

SLACK_REF = PlatformRef("slack", "T1", "C-PAY", "1700.1")
TEAMS_REF = PlatformRef("teams", "tenant-1", "19:c@thread.tacv2", "1")


@dataclass
class Clock:
    now: datetime = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


def decided(
    approval_id: str = "ap-1", ref: PlatformRef | None = SLACK_REF, **kw: object
) -> Decided:
    values: dict[str, object] = {
        "approval_id": approval_id,
        "decision": "approved",
        "decided_by": "bob",
        "outcome": "succeeded",
        "requester_ref": ref,
        "requester_result": Answered(Answer("Closed PAY-104.")),
        "state": "succeeded",
    }
    values.update(kw)
    return Decided(**values)  # type: ignore[arg-type]


async def card_on(engine: AsyncEngine, approval_id: str, platform: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            chat_approval_messages.insert().values(
                approval_id=approval_id,
                platform=platform,
                team_id="T1",
                card_channel_id="19:approvals@thread.tacv2;messageid=1700000000001",
                card_ts="1700000000001",
                requester_channel_id="",
                requester_thread_ts="",
                created_at=datetime(2026, 12, 3, tzinfo=UTC),
            )
        )


class Inbox:
    def __init__(self, fail: int = 0) -> None:
        self.got: list[ApprovalNotice] = []
        self.fail = fail

    async def __call__(self, notice: ApprovalNotice) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("platform down")
        self.got.append(notice)


async def test_requested_posts_on_every_other_card_platform(db: AsyncEngine) -> None:
    fanout = ApprovalFanout(SqlApprovalNotices(db), card_platforms=frozenset({"slack", "teams"}))
    await fanout.requested(["ap-1", "ap-2"], origin="slack")
    await fanout.requested(["ap-1"], origin="slack")  # published twice: still one notice
    slack, teams = Inbox(), Inbox()
    assert await fanout.deliver("slack", slack) == 0
    assert await fanout.deliver("teams", teams) == 2
    assert [(n.kind, n.approval_id, n.decided) for n in teams.got] == [
        ("post", "ap-1", None),
        ("post", "ap-2", None),
    ]
    assert await fanout.deliver("teams", teams) == 0  # delivered once


async def test_no_mirrors_means_no_notices(db: AsyncEngine) -> None:
    fanout = ApprovalFanout(SqlApprovalNotices(db))
    await fanout.requested(["ap-1"], origin="slack")
    await card_on(db, "ap-1", "slack")
    await fanout.decided([decided()], origin="slack")
    async with db.connect() as conn:
        assert (await conn.execute(select(approval_notices))).all() == []


async def test_decision_reaches_the_other_card_and_the_requesters_platform(
    db: AsyncEngine,
) -> None:
    fanout = ApprovalFanout(SqlApprovalNotices(db))
    await card_on(db, "ap-1", "slack")
    await card_on(db, "ap-1", "teams")
    sibling = decided("ap-2", state="rejected", decision="rejected", requester_result=Refused("x"))
    top = replace(decided(), siblings=(sibling,))
    await fanout.decided([top], origin="teams")  # bob clicked on Teams; Teams shows it itself
    slack, teams = Inbox(), Inbox()
    assert await fanout.deliver("teams", teams) == 0
    assert await fanout.deliver("slack", slack) == 2  # ap-2's requester is on Slack too
    first = slack.got[0]
    assert first.kind == "decided"
    assert first.decided == replace(top, siblings=())  # the whole decision, as JSON and back
    assert slack.got[1].decided == sibling


async def test_a_sweep_nobody_shows_reaches_every_platform(db: AsyncEngine) -> None:
    fanout = ApprovalFanout(SqlApprovalNotices(db), card_platforms=frozenset({"slack", "teams"}))
    expired = decided(decision="expired", state="expired", ref=TEAMS_REF)
    await fanout.decided([expired], origin=None)
    await fanout.decided([expired], origin=None)
    slack, teams = Inbox(), Inbox()
    assert (await fanout.deliver("slack", slack), await fanout.deliver("teams", teams)) == (1, 1)


async def test_a_later_outcome_is_a_new_notice(db: AsyncEngine) -> None:
    fanout = ApprovalFanout(SqlApprovalNotices(db), card_platforms=frozenset({"slack"}))
    await fanout.decided([decided(state="unknown")], origin="teams")
    await fanout.decided([decided(state="succeeded")], origin=None)  # the reconciler settled it
    slack = Inbox()
    assert await fanout.deliver("slack", slack) == 2
    assert [n.decided.state for n in slack.got if n.decided] == ["unknown", "succeeded"]


async def test_two_workers_deliver_each_notice_once(db: AsyncEngine, database_url: str) -> None:
    other = create_engine(database_url)
    try:
        fanouts = [
            ApprovalFanout(SqlApprovalNotices(e), card_platforms=frozenset({"slack", "teams"}))
            for e in (db, other)
        ]
        await fanouts[0].requested([f"ap-{i}" for i in range(12)], origin="teams")
        inbox = Inbox()
        for _ in range(12):  # rounds of six racing deliverers until all are delivered
            counts = await asyncio.gather(
                *(f.deliver("slack", inbox, limit=5) for f in fanouts for _ in range(3))
            )
            if sum(counts) == 0:
                break
        delivered = sorted(n.approval_id for n in inbox.got)
        assert delivered == sorted(f"ap-{i}" for i in range(12))  # each once, none twice
    finally:
        await other.dispose()


async def test_a_refused_notice_is_retried_with_backoff_then_given_up(db: AsyncEngine) -> None:
    clock = Clock()
    fanout = ApprovalFanout(
        SqlApprovalNotices(db, clock), card_platforms=frozenset({"teams"}), clock=clock
    )
    await fanout.requested(["ap-1"], origin="slack")
    inbox = Inbox(fail=1)
    assert await fanout.deliver("teams", inbox) == 0
    assert await fanout.deliver("teams", inbox) == 0  # backing off: not yet
    clock.now += timedelta(seconds=2)
    assert await fanout.deliver("teams", inbox) == 1
    assert [n.approval_id for n in inbox.got] == ["ap-1"]

    await fanout.requested(["ap-2"], origin="slack")
    never = Inbox(fail=10**6)
    for _ in range(MAX_ATTEMPTS):
        await fanout.deliver("teams", never)
        clock.now += timedelta(minutes=2)
    assert await fanout.deliver("teams", Inbox()) == 0  # given up after MAX_ATTEMPTS (logged)
    async with db.connect() as conn:
        status = (
            await conn.execute(
                select(approval_notices.c.status).where(approval_notices.c.approval_id == "ap-2")
            )
        ).scalar_one()
    assert status == "failed"


async def test_a_crashed_deliverers_notice_is_delivered_after_its_lease(db: AsyncEngine) -> None:
    clock = Clock()
    store = SqlApprovalNotices(db, clock)
    fanout = ApprovalFanout(store, card_platforms=frozenset({"teams"}), clock=clock)
    await fanout.requested(["ap-1"], origin="slack")
    assert len(await store.claim("teams", "crashed-worker", limit=5)) == 1  # then it died
    inbox = Inbox()
    assert await fanout.deliver("teams", inbox) == 0  # still leased
    clock.now += timedelta(seconds=61)
    assert await fanout.deliver("teams", inbox) == 1


async def test_forever_delivers_at_once_when_this_process_publishes(db: AsyncEngine) -> None:
    fanout = ApprovalFanout(SqlApprovalNotices(db), card_platforms=frozenset({"teams"}))
    got = asyncio.Queue[ApprovalNotice]()
    task = asyncio.create_task(fanout.forever("teams", 3600.0, got.put))
    try:
        await asyncio.sleep(0.05)  # the first (empty) pass is done; now it waits an hour
        await fanout.requested(["ap-1"], origin="slack")
        notice = await asyncio.wait_for(got.get(), timeout=5)
        assert notice.approval_id == "ap-1"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_prune_forgets_delivered_notices(db: AsyncEngine) -> None:
    clock = Clock()
    store = SqlApprovalNotices(db, clock)
    fanout = ApprovalFanout(store, card_platforms=frozenset({"teams"}), clock=clock)
    await fanout.requested(["ap-1", "ap-2"], origin="slack")
    await fanout.deliver("teams", Inbox(), limit=1)
    clock.now += timedelta(days=8)
    assert await store.prune(timedelta(days=7)) == 1  # the undelivered one stays
    assert await fanout.deliver("teams", Inbox()) == 1
