"""Who hears of an approval's state changes (App Home follows them), and writes going before
follow-up work: a decision's Homes need not wait for the run to resume, and one approval's
resume does not delay another approval's write."""

from __future__ import annotations

import asyncio
from typing import Any

from approval_fakes import Harness, identity

from approvals import ActionDecision, ApprovalStatus
from approvals.changes import ApprovalChanges, WritesFirst

APPROVE = ActionDecision("approve")


async def test_listeners_hear_created_decided_executing_and_finished_before_the_resume(
    harness: Harness,
) -> None:
    seen: list[tuple[str, ApprovalStatus]] = []
    heard = asyncio.Event()

    async def listener(approval_id: str) -> None:
        approval = await harness.store.get(approval_id)
        assert approval is not None
        seen.append((approval_id, approval.status))
        heard.set()

    harness.service.changes.listen(listener)
    approval_id = await harness.open("alice")
    await heard.wait()
    assert seen == [(approval_id, ApprovalStatus.PENDING)]

    resumed = asyncio.Event()
    release = asyncio.Event()
    original = harness.resumer.resume

    async def slow_resume(*args: Any, **kwargs: Any) -> Any:
        resumed.set()
        await release.wait()  # a model step that takes its time
        return await original(*args, **kwargs)

    harness.resumer.resume = slow_resume  # type: ignore[method-assign]
    decision = asyncio.create_task(harness.service.decide(identity("bob"), approval_id, APPROVE))
    await resumed.wait()
    for _ in range(20):  # let the listener tasks told so far run
        await asyncio.sleep(0)
    statuses_at_resume = [status for _, status in seen[1:]]
    # Told of the decision, the call running and its outcome while the run still resumes.
    assert statuses_at_resume[-1] is ApprovalStatus.SUCCEEDED
    assert len(statuses_at_resume) >= 3  # decided, executing, finished
    release.set()
    report = await decision
    assert report.approval.status is ApprovalStatus.SUCCEEDED


async def test_a_failing_listener_never_fails_the_decision(harness: Harness) -> None:
    async def broken(approval_id: str) -> None:
        raise RuntimeError("slack is down")

    harness.service.changes.listen(broken)
    approval_id = await harness.open("alice")
    report = await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert report.approval.status is ApprovalStatus.SUCCEEDED


async def test_undo_stops_the_listener() -> None:
    told: list[str] = []

    async def listener(approval_id: str) -> None:
        told.append(approval_id)

    changes = ApprovalChanges()
    undo = changes.listen(listener)
    changes.changed("a1")
    undo()
    changes.changed("a2")
    for _ in range(5):
        await asyncio.sleep(0)
    assert told == ["a1"]


async def test_follow_up_work_waits_for_writes_on_their_way() -> None:
    writes = WritesFirst(max_wait=60)
    order: list[str] = []
    may_finish = asyncio.Event()

    async def write() -> None:
        async with writes.writing():
            await may_finish.wait()
            order.append("write")

    async def follow_up() -> None:
        await writes.after_writes()
        order.append("follow-up")

    writing = asyncio.create_task(write())
    await asyncio.sleep(0)
    following = asyncio.create_task(follow_up())
    for _ in range(5):
        await asyncio.sleep(0)
    assert order == []  # the follow-up waits while the write is on its way
    may_finish.set()
    await asyncio.gather(writing, following)
    assert order == ["write", "follow-up"]
    await writes.after_writes()  # nothing writing: no wait at all


async def test_follow_up_work_waits_only_so_long_for_a_stream_of_writes() -> None:
    writes = WritesFirst(max_wait=0.01)
    never = asyncio.Event()

    async def endless_write() -> None:
        async with writes.writing():
            await never.wait()

    writing = asyncio.create_task(endless_write())
    await asyncio.sleep(0)
    await asyncio.wait_for(writes.after_writes(), 5)  # bounded by max_wait, not by the write
    writing.cancel()
