"""Deciding approvals: approver rules, edits, exactly-once execution, revocation, expiry."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from approval_fakes import Harness, identity, make_interrupt

from agent_core.approved_calls import ApprovedCall
from approvals import (
    ActionDecision,
    AlreadyDecidedError,
    ApprovalExpiredError,
    ApprovalStatus,
    InvalidEditError,
    NotAuthorisedError,
)
from audit import AuditQuery, EventKind

APPROVE = ActionDecision("approve")


async def test_ids_are_opaque_and_unguessable(harness: Harness) -> None:
    ids = {await harness.open(thread_id=f"thr-{i}") for i in range(30)}
    assert len(ids) == 30
    assert all(len(i) >= 26 and "thr" not in i for i in ids)


async def test_an_approval_records_the_actions_policy_and_read_chain(harness: Harness) -> None:
    approval_id = await harness.open()
    approval = await harness.store.get(approval_id)
    assert approval is not None
    assert approval.status is ApprovalStatus.PENDING
    [action] = approval.actions
    assert (action.tool, action.server, action.approver_group, action.sensitive) == (
        "ticketing_close_ticket",
        "ticketing",
        "ticket-leads",
        True,
    )
    assert [(r.tool, r.ref_id) for r in approval.reads] == [("ticketing_get_ticket", "PAY-7")]
    # ticketing_close_ticket's max age in the default policy: 1800 s.
    assert (approval.expires_at - approval.created_at).total_seconds() == 1800


async def test_approve_runs_the_write_once_as_the_requester(harness: Harness) -> None:
    approval_id = await harness.open("alice")
    report = await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert report.approval.status is ApprovalStatus.SUCCEEDED
    assert report.approval.decided_by == "bob"
    assert harness.executor.executions == 1
    [(subject, tool, args, _key)] = harness.executor.calls
    assert (subject, tool, args) == (
        "alice",
        "ticketing_close_ticket",
        {"key": "PAY-7", "resolution": "fixed"},
    )
    # Fresh tokens were minted for the requester, never the approver.
    assert harness.broker.invalidated == [("alice", "ticketing")]
    assert harness.broker.minted == [("alice", "ticketing")]
    # ...and the call was handed that token, to carry instead of asking for another.
    assert [{s: t.audience for s, t in given.items()} for given in harness.resumer.tokens] == [
        {"ticketing": "aud:ticketing"}
    ]
    assert [r[0] for r in harness.resumer.resumes] == ["alice"]


async def test_a_second_decision_is_told_who_decided(harness: Harness) -> None:
    approval_id = await harness.open("alice")
    await harness.service.decide(identity("bob"), approval_id, APPROVE)
    with pytest.raises(AlreadyDecidedError) as lost:
        await harness.service.decide(identity("carol"), approval_id, ActionDecision("reject"))
    assert lost.value.decided_by == "bob"
    assert harness.executor.executions == 1
    assert len(harness.resumer.resumes) == 1


async def test_concurrent_approvals_execute_once(harness: Harness) -> None:
    approval_id = await harness.open("alice")
    approvers = ["bob", "carol"] * 25
    results = await asyncio.gather(
        *(harness.service.decide(identity(a), approval_id, APPROVE) for a in approvers),
        return_exceptions=True,
    )
    wins = [r for r in results if not isinstance(r, BaseException)]
    assert len(wins) == 1
    assert all(isinstance(r, AlreadyDecidedError) for r in results if r not in wins)
    assert len(harness.executor.calls) == 1


async def test_self_approval_of_a_sensitive_tool_is_refused(harness: Harness) -> None:
    approval_id = await harness.open("bob")  # bob is a ticket lead himself
    with pytest.raises(NotAuthorisedError, match="your own request"):
        await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert (await harness.store.get(approval_id)).status is ApprovalStatus.PENDING  # type: ignore[union-attr]
    assert harness.executor.executions == 0


async def test_self_approval_of_a_non_sensitive_tool_is_allowed(harness: Harness) -> None:
    approval_id = await harness.open(
        "bob", tool="ticketing_add_comment", args={"key": "PAY-7", "body": "on it"}
    )
    report = await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert report.approval.status is ApprovalStatus.SUCCEEDED


async def test_an_approver_outside_the_group_is_refused(harness: Harness) -> None:
    approval_id = await harness.open("alice")
    for outsider in ("dave", "mallory", "alice"):
        with pytest.raises(NotAuthorisedError, match="ticket-leads"):
            await harness.service.decide(identity(outsider), approval_id, APPROVE)
    assert harness.executor.executions == 0


async def test_an_expired_approval_is_refused(harness: Harness) -> None:
    approval_id = await harness.open("alice")
    harness.clock.advance(minutes=30)
    with pytest.raises(ApprovalExpiredError):
        await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert harness.executor.executions == 0


async def test_the_sweeper_rejects_expired_approvals_and_answers_the_requester(
    harness: Harness,
) -> None:
    old = await harness.open("alice", thread_id="thr-old")
    harness.clock.advance(minutes=20)
    young = await harness.open("dave", thread_id="thr-young")
    harness.clock.advance(minutes=10)  # old is 30 min (max 30), young 10 min
    reports = await harness.service.sweep()
    assert [r.approval.approval_id for r in reports] == [old]
    [report] = reports
    assert report.approval.status is ApprovalStatus.EXPIRED
    assert report.approval.decided_by == "system:expiry"
    # The requester's thread was resumed with a rejection that says why.
    [(subject, thread_id, decisions)] = harness.resumer.resumes
    assert (subject, thread_id) == ("alice", "thr-old")
    assert decisions[0]["type"] == "reject"
    assert "Expired" in decisions[0]["message"]
    assert harness.executor.executions == 0
    assert (await harness.store.get(young)).status is ApprovalStatus.PENDING  # type: ignore[union-attr]
    assert await harness.service.sweep() == []


async def test_reject_resumes_with_the_reason_and_writes_nothing(harness: Harness) -> None:
    approval_id = await harness.open("alice")
    report = await harness.service.decide(
        identity("carol"), approval_id, ActionDecision("reject", message="not this week")
    )
    assert report.approval.status is ApprovalStatus.REJECTED
    assert harness.resumer.resumes[0][2] == [{"type": "reject", "message": "not this week"}]
    assert harness.executor.executions == 0


async def test_a_valid_edit_runs_the_edited_arguments(harness: Harness) -> None:
    approval_id = await harness.open("alice")
    edit = ActionDecision("edit", args={"key": "PAY-7", "resolution": "duplicate"})
    report = await harness.service.decide(identity("bob"), approval_id, edit)
    assert report.approval.status is ApprovalStatus.SUCCEEDED
    assert harness.executor.calls[0][2] == {"key": "PAY-7", "resolution": "duplicate"}
    [decision] = await harness.sink.query(AuditQuery(kinds=(EventKind.DECISION,)))
    assert decision.args_summary == {"key": "PAY-7", "resolution": "fixed"}
    assert decision.edited_args_summary == {"key": "PAY-7", "resolution": "duplicate"}
    assert (decision.approver, decision.decision) == ("bob", "edit")


@pytest.mark.parametrize(
    ("args", "tool", "field"),
    [
        ({"key": "PAY-7", "resolution": "deleted"}, None, "resolution"),
        ({"key": "not a key", "resolution": "fixed"}, None, "key"),
        ({"key": "PAY-7"}, None, "resolution"),
        ({"key": "PAY-7", "resolution": "fixed", "assignee": "eve"}, None, "assignee"),
        ({"key": "PAY-7", "resolution": "fixed", "idempotency_key": "x"}, None, "idempotency_key"),
        ({"key": "PAY-7", "resolution": "fixed"}, "ticketing_delete_ticket", "tool"),
    ],
)
async def test_invalid_edits_are_refused_field_by_field(
    harness: Harness, args: dict[str, str], tool: str | None, field: str
) -> None:
    approval_id = await harness.open("alice")
    with pytest.raises(InvalidEditError) as refused:
        await harness.service.decide(
            identity("bob"), approval_id, ActionDecision("edit", args=args), edited_tool=tool
        )
    assert field in refused.value.field_errors
    assert (await harness.store.get(approval_id)).status is ApprovalStatus.PENDING  # type: ignore[union-attr]
    assert harness.executor.executions == 0


async def test_a_revoked_requester_writes_nothing_and_the_approval_fails(
    harness: Harness,
) -> None:
    approval_id = await harness.open("alice")
    harness.broker.revoked.add("alice")
    report = await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert report.approval.status is ApprovalStatus.FAILED
    assert "access to ticketing was refused" in report.approval.outcome["reason"]
    assert harness.executor.executions == 0
    # The thread still gets an answer: resumed with a rejection carrying the reason.
    [(subject, _thread, decisions)] = harness.resumer.resumes
    assert subject == "alice"
    assert decisions[0]["type"] == "reject"
    assert "Not executed" in decisions[0]["message"]


async def test_a_call_that_fails_before_leaving_opsbot_ends_failed_and_is_audited(
    harness: Harness,
) -> None:
    approval_id = await harness.open("alice")
    harness.resumer.fail_with = ConnectionError("checkpointer down")
    report = await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert report.approval.status is ApprovalStatus.FAILED
    assert report.approval.outcome["reason"] == "running the call failed (error:ConnectionError)"
    assert harness.executor.executions == 0
    finished = await harness.sink.query(AuditQuery(kinds=(EventKind.APPROVAL_FINISHED,)))
    assert [e.outcome for e in finished] == ["failed"]


async def test_finishing_a_stuck_claim_has_no_second_effect(harness: Harness) -> None:
    approval_id = await harness.open("alice")
    # A crash after the claim and the write, before the approval was finished:
    await harness.store.claim(approval_id, "bob", [APPROVE], harness.clock())
    interrupt = harness.resumer.interrupts["thr-1"]
    await harness.resumer.resume(
        identity("alice"), "thr-1", [{"type": "approve"}], approval_id=approval_id
    )
    assert interrupt is harness.resumer.interrupts["thr-1"]
    harness.clock.advance(minutes=3)
    [report] = await harness.service.finish_interrupted(timedelta(minutes=2))
    assert report.approval.status is ApprovalStatus.SUCCEEDED
    assert len(harness.executor.calls) == 2  # the write was replayed with the same key ...
    assert harness.executor.executions == 1  # ... and the server dropped it
    assert await harness.service.finish_interrupted(timedelta(0)) == []


async def test_interrupted_approvals_are_finished_once_after_the_grace(harness: Harness) -> None:
    stuck = await harness.open("alice", thread_id="thr-1")
    await harness.store.claim(stuck, "bob", [APPROVE], harness.clock())  # then a crash
    live = await harness.open("alice", thread_id="thr-2")
    harness.clock.advance(seconds=90)
    await harness.store.claim(live, "carol", [APPROVE], harness.clock())  # still deciding
    grace = timedelta(minutes=2)
    assert await harness.service.finish_interrupted(grace) == []  # too recent to judge

    harness.clock.advance(seconds=60)  # stuck: 150 s old; live: 60 s
    reports = await asyncio.gather(*(harness.service.finish_interrupted(grace) for _ in range(4)))
    [report] = [r for batch in reports for r in batch]
    assert report.approval.approval_id == stuck
    assert report.approval.status is ApprovalStatus.SUCCEEDED
    assert report.approval.decided_by == "bob"
    assert harness.executor.executions == 1
    assert [r[1] for r in harness.resumer.resumes] == ["thr-1"]
    still = await harness.store.get(live)
    assert still is not None
    assert still.status is ApprovalStatus.DECIDING


async def test_a_stuck_claim_on_a_thread_resumed_before_fails_unless_the_write_is_recorded(
    harness: Harness,
) -> None:
    from agent_core.errors import NoPendingApprovalError

    approval_id = await harness.open("alice")
    await harness.store.claim(approval_id, "bob", [APPROVE], harness.clock())
    harness.resumer.fail_with = NoPendingApprovalError("not waiting")
    harness.clock.advance(minutes=3)
    [report] = await harness.service.finish_interrupted(timedelta(minutes=2))
    assert report.approval.status is ApprovalStatus.FAILED
    assert "no write is recorded" in report.approval.outcome["reason"]


async def test_each_write_call_gets_its_own_approval_and_only_approved_ones_run(
    harness: Harness,
) -> None:
    interrupt = make_interrupt(
        tool="ticketing_add_comment", args={"key": "PAY-7", "body": "hi"}, n_actions=3
    )
    harness.resumer.interrupts[interrupt.thread_id] = interrupt
    first, second, third = await harness.service.open_all(interrupt, identity("alice"))
    assert [len(a.actions) for a in (first, second, third)] == [1, 1, 1]
    assert [a.actions[0].tool_call_id for a in (first, second, third)] == [
        "call-0",
        "call-1",
        "call-2",
    ]
    assert {a.batch for a in (first, second, third)} == {first.approval_id}

    edit = ActionDecision("edit", args={"key": "PAY-7", "body": "edited"})
    edited = await harness.service.decide(identity("bob"), first.approval_id, edit)
    # The approved (edited) call runs on its own decision, with the edited arguments ...
    assert edited.approval.status is ApprovalStatus.SUCCEEDED
    assert [args for _s, _t, args, _k in harness.executor.calls] == [
        {"key": "PAY-7", "body": "edited"}
    ]
    rejected = await harness.service.decide(
        identity("carol"), second.approval_id, ActionDecision("reject", message="no")
    )
    assert rejected.approval.status is ApprovalStatus.REJECTED
    # ... the rejected one never runs, and the run waits for the third.
    assert len(harness.executor.calls) == 1
    assert harness.resumer.resumes == []

    last = await harness.service.decide(identity("bob"), third.approval_id, APPROVE)
    assert last.approval.status is ApprovalStatus.SUCCEEDED
    assert last.result is not None  # this decision resumed the run
    # One resume with one decision per call, in order, fed the two stored results: the
    # resume ran nothing again.
    [(_who, _thread, decisions)] = harness.resumer.resumes
    assert [d["type"] for d in decisions] == ["edit", "reject", "approve"]
    assert [sorted(r) for r in harness.resumer.recorded] == [["call-0", "call-2"]]
    assert [args for _s, _t, args, _k in harness.executor.calls] == [
        {"key": "PAY-7", "body": "edited"},
        {"key": "PAY-7", "body": "hi"},
    ]
    assert len({key for *_x, key in harness.executor.calls}) == 2  # one key per write
    stored = await harness.store.get(second.approval_id)
    assert stored is not None
    assert stored.status is ApprovalStatus.REJECTED


async def test_an_undecided_call_of_the_step_keeps_the_run_waiting_not_the_approved_call(
    harness: Harness,
) -> None:
    interrupt = make_interrupt(n_actions=2)
    harness.resumer.interrupts[interrupt.thread_id] = interrupt
    first, second = await harness.service.open_all(interrupt, identity("alice"))
    ran = await harness.service.decide(identity("bob"), first.approval_id, APPROVE)
    # The approved call ran at once; the run waits for the undecided one.
    assert ran.approval.status is ApprovalStatus.SUCCEEDED
    assert len(harness.executor.calls) == 1
    assert harness.resumer.resumes == []
    # The undecided one expires: the sweeper rejects it, and the run resumes once, fed the
    # stored result of the call that ran (not running it again).
    harness.clock.advance(hours=2)
    [expired] = await harness.service.sweep()
    assert expired.approval.approval_id == second.approval_id
    assert expired.approval.status is ApprovalStatus.EXPIRED
    assert expired.result is not None
    [(_who, _thread, decisions)] = harness.resumer.resumes
    assert [d["type"] for d in decisions] == ["approve", "reject"]
    assert len(harness.executor.calls) == 1


# --- reconciling a write the server never applied ------------------------------------------


async def _reconciled_not_applied(harness: Harness) -> None:
    """What ``opsbot reconcile`` does when the server's change log has no such key."""
    assert harness.resumer.audit is not None
    for pending in await harness.resumer.audit.unresolved_writes():
        await harness.resumer.audit.write_outcome(
            pending, outcome="not_applied", detail={"resolved_by": "reconcile"}
        )


async def test_a_never_applied_keyed_write_is_run_again_once_by_the_reconcile(
    harness: Harness,
) -> None:
    approval_id = await harness.open("alice")
    harness.resumer.answers = [("no-outcome", None)]  # sent, then nothing heard back
    report = await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert report.approval.status is ApprovalStatus.UNKNOWN
    assert harness.executor.executions == 0
    assert await harness.service.settle_unknown() == []  # nothing known yet

    await _reconciled_not_applied(harness)
    [settled] = await harness.service.settle_unknown()
    # Its key makes a second attempt safe: run once more, and it happened.
    assert settled.approval.status is ApprovalStatus.SUCCEEDED
    assert harness.executor.executions == 1
    assert len(harness.resumer.executed) == 2
    assert await harness.service.settle_unknown() == []


async def test_a_write_still_not_applied_after_its_one_retry_ends_failed(
    harness: Harness,
) -> None:
    approval_id = await harness.open("alice")
    harness.resumer.answers = [("no-outcome", None), ("no-outcome", None)]
    await harness.service.decide(identity("bob"), approval_id, APPROVE)
    await _reconciled_not_applied(harness)
    [retried] = await harness.service.settle_unknown()
    assert retried.approval.status is ApprovalStatus.UNKNOWN  # the retry went unheard too
    await _reconciled_not_applied(harness)
    [settled] = await harness.service.settle_unknown()
    assert settled.approval.status is ApprovalStatus.FAILED
    assert settled.approval.outcome_reason is not None
    assert "retried once and still not applied" in settled.approval.outcome_reason
    assert len(harness.resumer.executed) == 2  # the call, and its one retry
    assert harness.executor.executions == 0
    assert await harness.service.settle_unknown() == []


async def test_a_never_applied_write_without_a_key_is_failed_not_retried(
    harness: Harness,
) -> None:
    approval_id = await harness.open("alice")
    harness.resumer.keyed = False  # a tool without an idempotency key
    harness.resumer.answers = [("no-outcome", None)]
    await harness.service.decide(identity("bob"), approval_id, APPROVE)
    await _reconciled_not_applied(harness)
    [settled] = await harness.service.settle_unknown()
    assert settled.approval.status is ApprovalStatus.FAILED
    assert settled.approval.outcome_reason is not None
    assert "not retried" in settled.approval.outcome_reason
    assert "no idempotency key" in settled.approval.outcome_reason
    assert len(harness.resumer.executed) == 1
    assert harness.executor.executions == 0


# --- crashes between a decision, its call and the resume -----------------------------------


async def test_a_crash_after_the_call_ran_is_finished_by_the_sweeper_without_a_second_send(
    harness: Harness,
) -> None:
    from approvals.store import ApprovalStore

    store: ApprovalStore = harness.store
    approval_id = await harness.open("alice")
    claimed = await store.claim(approval_id, "bob", [APPROVE], harness.clock())
    await store.advance(approval_id, ApprovalStatus.DECIDING, ApprovalStatus.APPROVED)
    await store.advance(approval_id, ApprovalStatus.APPROVED, ApprovalStatus.EXECUTING)
    action = claimed.actions[0]
    # The call reached the server and its outcome was audited; then the process died.
    await harness.resumer.execute(
        identity("alice"),
        ApprovedCall(
            "thr-1", claimed.batch, action.tool_call_id, action.tool, action.args, action.args
        ),
    )
    assert harness.executor.executions == 1

    harness.clock.advance(seconds=25)  # the sweeper's grace is 20 s
    [report] = await harness.service.finish_interrupted(timedelta(seconds=20))
    assert report.approval.status is ApprovalStatus.SUCCEEDED
    assert len(harness.resumer.executed) == 1  # its audit says it ran: not sent again
    assert harness.executor.executions == 1
    # The run resumed once; the model is told it ran (its own result was lost).
    [(_who, _thread, decisions)] = harness.resumer.resumes
    assert [d["type"] for d in decisions] == ["approve"]
    [recorded] = harness.resumer.recorded
    assert "succeeded" in recorded[action.tool_call_id]["data"]["content"]
    assert await harness.service.finish_interrupted(timedelta(seconds=20)) == []


async def test_a_crash_during_the_resume_is_resumed_once_after_the_lease(
    harness: Harness,
) -> None:
    from approvals.service import RESUME_LEASE

    approval_id = await harness.open("alice")
    harness.resumer.crash_resume = asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        await harness.service.decide(identity("bob"), approval_id, APPROVE)
    stored = await harness.store.get(approval_id)
    assert stored is not None
    assert stored.status is ApprovalStatus.SUCCEEDED  # the call ran and was recorded
    assert stored.resume_claimed_at is not None
    assert stored.resumed_at is None
    # A claimed resume is left alone while it may still be running elsewhere ...
    harness.clock.advance(seconds=30)
    assert await harness.service.finish_interrupted(timedelta(seconds=20)) == []
    # ... and taken over after the lease: resumed once, fed the stored result.
    harness.clock.advance(seconds=RESUME_LEASE.total_seconds())
    reports = await asyncio.gather(
        *(harness.service.finish_interrupted(timedelta(seconds=20)) for _ in range(3))
    )
    [report] = [r for batch in reports for r in batch]
    assert report.result is not None
    assert len(harness.resumer.resumes) == 2  # the crashed one, and this one
    assert list(harness.resumer.recorded[-1]) == ["call-0"]
    assert harness.executor.executions == 1
    assert len(harness.resumer.executed) == 1
    assert await harness.service.finish_interrupted(timedelta(seconds=20)) == []


async def test_an_approve_click_reaches_its_write_in_three_store_statements() -> None:
    """The click's way to its write: read, claim, and one move on to ``executing``
    (``deciding → approved → executing`` was two); the write then runs once, not as a rerun."""
    from approval_fakes import build_harness

    from approvals import MemoryApprovalStore

    calls: list[tuple[str, int]] = []

    class Counting(MemoryApprovalStore):
        def __getattribute__(self, name: str) -> object:
            attr = super().__getattribute__(name)
            if name in ("get", "claim", "advance", "finish", "find", "reclaim"):
                calls.append((name, harness.executor.executions))
            return attr

    harness = build_harness(Counting())
    approval_id = await harness.open("alice")
    calls.clear()
    report = await harness.service.decide(identity("bob"), approval_id, APPROVE)
    assert report.approval.status is ApprovalStatus.SUCCEEDED
    assert harness.executor.executions == 1
    before_write = [name for name, executions in calls if executions == 0]
    assert before_write == ["get", "claim", "advance"]


async def test_a_sent_writes_bookkeeping_waits_for_the_other_writes_on_their_way() -> None:
    """Twenty clicks share one loop: once a write went out, finishing its approval (reading
    its outcome back, the state change, its audit row) waits until the other approvals'
    writes went out too, so those are not queued behind it."""
    from approval_fakes import build_harness

    harness = build_harness()
    first = await harness.open("alice", thread_id="t-first")
    second = await harness.open("alice", thread_id="t-second")
    may_write = asyncio.Event()
    execute = harness.resumer.execute

    async def slow_second(*args: Any, **kwargs: Any) -> dict[str, Any]:
        if args[1].thread_id == "t-second":
            await may_write.wait()
        return await execute(*args, **kwargs)

    harness.resumer.execute = slow_second  # type: ignore[method-assign]
    deciding = [
        asyncio.create_task(harness.service.decide(identity("bob"), a, APPROVE))
        for a in (first, second)
    ]
    for _ in range(50):
        await asyncio.sleep(0)
    assert harness.executor.executions == 1  # the first write went out
    status = (await harness.store.get(first)).status  # type: ignore[union-attr]
    assert status is ApprovalStatus.EXECUTING  # its bookkeeping waits for the second write
    may_write.set()
    reports = await asyncio.gather(*deciding)
    assert [r.approval.status for r in reports] == [ApprovalStatus.SUCCEEDED] * 2


async def test_a_write_that_errored_without_a_refusal_is_unknown_not_succeeded(
    harness: Harness,
) -> None:
    """Invariant 13: the server answered with an error that does not prove the write was
    refused (a timeout, a 5xx): it may have been applied, so the approval is ``unknown``
    until the reconciler settles it, never ``succeeded`` and never ``failed``."""
    approval_id = await harness.open("alice")
    harness.resumer.answers = [("error:ToolTimeoutError", "the ticketing server timed out")]
    report = await harness.service.decide(identity("bob"), approval_id, ActionDecision("approve"))
    assert report.approval.status is ApprovalStatus.UNKNOWN
    assert report.approval.outcome_reason is not None
    assert "timed out" in report.approval.outcome_reason
    assert "being reconciled" in report.approval.outcome_reason
    assert await harness.service.settle_unknown() == []  # nothing known yet: stays unknown
