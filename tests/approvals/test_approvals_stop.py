"""Stop on top of the approvals: a withdrawn step resumes without a model step, and a Stop
pressed while an approved call is at its server reaches the resume that follows it."""

from __future__ import annotations

import asyncio
from typing import Any

from approval_fakes import Harness, build_harness, identity

from agent_core.runs import MemoryRunRegistry
from approvals import ActionDecision, ApprovalStatus
from approvals.service import ApprovalService

APPROVE = ActionDecision("approve")


def with_runs(harness: Harness) -> MemoryRunRegistry:
    """The harness's service, with a run registry (as ``opsbot.wiring`` builds it)."""
    runs = MemoryRunRegistry()
    service = harness.service
    harness.service = ApprovalService(
        service.store,
        service.audit,
        service.tools,
        harness.resumer,
        service._identities,
        harness.broker,
        clock=harness.clock,
        runs=runs,
    )
    return runs


def running(runs: MemoryRunRegistry) -> list[str]:
    return [r for r, (_t, state) in runs._runs.items() if state == "running"]


async def test_withdraw_resumes_the_step_already_stopped_and_runs_nothing() -> None:
    harness = build_harness()
    runs = with_runs(harness)
    approval_id = await harness.open("alice", thread_id="thr-stop")
    [report] = await harness.service.withdraw(identity("alice"), "thr-stop")
    assert report.approval.approval_id == approval_id
    assert report.approval.status is ApprovalStatus.WITHDRAWN
    assert harness.executor.executions == 0
    assert harness.resumer.stopped == [True]  # resumed once, with the stop already set
    assert running(runs) == []


async def test_an_approved_call_resumes_in_a_registered_run_that_is_closed_after() -> None:
    harness = build_harness()
    runs = with_runs(harness)
    approval_id = await harness.open("alice", thread_id="thr-go")
    report = await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert report.approval.status is ApprovalStatus.SUCCEEDED
    assert harness.resumer.stopped == [False]
    assert len(runs._runs) == 1  # one run from the call to the resume
    assert running(runs) == []


async def test_stop_while_the_approved_call_runs_lets_it_finish_and_reaches_the_resume() -> None:
    harness = build_harness()
    runs = with_runs(harness)
    approval_id = await harness.open("alice", thread_id="thr-held")
    entered, release = asyncio.Event(), asyncio.Event()
    execute = harness.resumer.execute

    async def held(*args: Any, **kwargs: Any) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return await execute(*args, **kwargs)

    harness.resumer.execute = held  # type: ignore[method-assign]
    deciding = asyncio.create_task(harness.service.decide(identity("bob"), approval_id, APPROVE))
    await asyncio.wait_for(entered.wait(), 5)
    assert await runs.stop("thr-held", "alice") == 1  # the decision's run is found
    release.set()
    report = await deciding
    assert report.approval.status is ApprovalStatus.SUCCEEDED  # the approved call ran
    assert harness.executor.executions == 1
    assert harness.resumer.stopped == [True]  # the resume saw the Stop: no model step
