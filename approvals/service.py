"""Deciding approvals exactly once, running each approved call, resuming the thread.

The flow of a decision: check the approver (group, self-approval, expiry) → validate edits →
**claim** (``pending → deciding``, one winner) → record the decision → a rejection is final;
an approved call runs **now**, on its own decision (``approved → executing``): the
*requester* must still get tokens (fresh, never the approver's), the call carries an
idempotency key derived from the batch, and its outcome is read from the audit log
(``succeeded | failed | unknown``); its result is stored with the approval. When the last
call of the model step is decided, the paused run resumes once, and the model gets the stored
results — nothing runs twice. A requester whose access was revoked gets nothing written: the
approval ends ``failed`` with the reason.

Example::

    service = ApprovalService(store, audit_log, tools, agent, identities, broker)
    approval = await service.open(interrupt, requester)
    report = await service.decide(approver, approval.approval_id, ActionDecision("approve"))
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from agent_core.answer import Interrupt
from agent_core.approved_calls import ApprovedCall, result_note
from agent_core.errors import NoPendingApprovalError
from agent_core.policy import ToolPolicy
from agent_core.runs import ALREADY_STOPPED, RunRegistry, RunStop, StopSignal
from approvals.changes import ApprovalChanges, WritesFirst
from approvals.errors import (
    ApprovalError,
    InvalidEditError,
)
from approvals.records import (
    EXPIRY_DECIDER,
    ActionDecision,
    Approval,
    ApprovalStatus,
    proposed_action,
    read_chain,
)
from approvals.rules import check_decider, validate_edit
from approvals.store import ApprovalStore
from approvals.write_records import WriteRecords, safe_to_send
from audit.log import AuditLog, EventKind, error_outcome
from broker.errors import BrokerError
from broker.types import AccessToken, Broker, Identity, TokensByServer
from infra.clock import Clock, IdFactory, random_id, utc_now
from infra.faults import crash_point

log = logging.getLogger(__name__)

DEFAULT_MAX_AGE = timedelta(hours=1)
# How long a claimed resume may run before a sweeper takes it over (the claimer crashed).
RESUME_LEASE = timedelta(minutes=5)
# Where an approval keeps the results of its calls that ran, for the run's resume.
TOOL_RESULTS = "tool_results"
# Set on an approval whose never-applied write was run again by the reconcile.
RETRIED = "retried_after_reconcile"


class Resumer(Protocol):
    """Runs approved calls of a paused thread and resumes it, as ``identity`` (the requester)
    (``agent_core.Agent`` provides it)."""

    async def execute(
        self, identity: Identity, call: ApprovedCall, *, tokens: TokensByServer | None = None
    ) -> dict[str, Any]:
        """Run one approved call now, with the requester's ``tokens`` minted fresh just
        before for this decision: the call carries its server's one, no other exchange; its
        result, to store."""
        ...

    async def resume(
        self,
        identity: Identity,
        thread_id: str,
        decisions: list[dict[str, Any]],
        *,
        approval_id: str,
        recorded: Mapping[str, Mapping[str, Any]] | None = None,
        stop: StopSignal | None = None,
    ) -> Any:
        """Resume with one decision per call; ``recorded`` results are fed, not re-run;
        ``stop`` is read before each model step (the requester's Stop)."""
        ...


class ToolCatalog(Protocol):
    """What the approvals need to know about tools (``agent_core.Agent`` provides it)."""

    @property
    def policy(self) -> ToolPolicy: ...

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        """The schema an approver's edit is validated against (without ``idempotency_key``)."""
        ...

    def is_allowed(self, name: str) -> bool: ...

    def takes_exchanged_token(self, server: str) -> bool:
        """Whether ``server``'s calls carry the requester's exchanged token (``exchange``
        mode); the others carry opsbot's own credential, none, or the requester's OAuth
        grant, taken when the call runs."""
        ...


IdentityLookup = Callable[[str], Awaitable[Identity]]
"""The requester's current identity (groups from the IdP directory) by subject."""


def _audit_subject(approval: Approval, tool: str) -> dict[str, Any]:
    """What every audit row about ``approval`` names: whose request it is, its thread, the
    tool and the approval."""
    return {
        "requester": approval.requester_subject,
        "thread_id": approval.thread_id,
        "tool": tool,
        "approval_id": approval.approval_id,
    }


@dataclass(frozen=True, slots=True)
class DecisionReport:
    """What happened: the approval in its final state and the requester's resumed result."""

    approval: Approval
    result: Any = None  # agent_core RunResult, or None when the resume itself failed
    # The other approvals of the batch this decision finished (their cards change too).
    siblings: tuple[Approval, ...] = ()


class ApprovalService:
    """Opens approvals from interrupts, decides them exactly once, expires old ones."""

    def __init__(
        self,
        store: ApprovalStore,
        audit: AuditLog,
        tools: ToolCatalog,
        resumer: Resumer,
        identities: IdentityLookup,
        broker: Broker,
        *,
        clock: Clock = utc_now,
        new_id: IdFactory = random_id,
        runs: RunRegistry | None = None,
        writes: WritesFirst | None = None,
    ) -> None:
        # Resumed runs are registered here too, so the requester's Stop reaches them.
        self._runs = runs
        # Approved writes go before follow-up work (resumes, listeners) on this loop.
        self.writes = writes or WritesFirst()
        # Told of every state change of an approval here (App Home is republished from it).
        self.changes = ApprovalChanges(self.writes)
        self.store = store
        self.audit = audit
        self._records = WriteRecords(audit)
        self.tools = tools
        self._resumer = resumer
        self._identities = identities
        self._broker = broker
        self._clock = clock
        self._new_id = new_id

    async def open(self, interrupt: Interrupt, requester: Identity) -> Approval:
        """Record the approvals for ``interrupt``; the first one (see ``open_all``)."""
        return (await self.open_all(interrupt, requester))[0]

    async def open_all(self, interrupt: Interrupt, requester: Identity) -> list[Approval]:
        """One pending approval per proposed write call, in the model's order, sharing a
        batch: each is decided on its own, and the run resumes once all are decided."""
        now = self._clock()
        reads = read_chain(interrupt)
        size = len(interrupt.action_requests)
        approvals: list[Approval] = []
        for index, request in enumerate(interrupt.action_requests):
            cls = self.tools.policy.classify(request.name)
            action = proposed_action(request, cls, self.tools.tool_schema(request.name))
            approval_id = self._new_id()
            approval = Approval(
                approval_id=approval_id,
                thread_id=interrupt.thread_id,
                requester_subject=requester.subject,
                requester_chat_user=requester.chat_user,
                actions=(action,),
                reads=reads,
                created_at=now,
                expires_at=now + (cls.max_approval_age or DEFAULT_MAX_AGE),
                batch_id=approvals[0].approval_id if approvals else approval_id,
                batch_index=index,
                batch_size=size,
            )
            await self.store.create(approval)
            self.changes.changed(approval_id)
            await self.audit.record(
                EventKind.APPROVAL_REQUESTED,
                **_audit_subject(approval, action.tool),
                args=action.args,
                model_used=interrupt.model_used or None,
                detail={"reads": [f"{r.tool} {r.ref_id}" for r in reads]},
            )
            approvals.append(approval)
        return approvals

    async def decide(
        self,
        approver: Identity,
        approval_id: str,
        decision: ActionDecision,
        *,
        edited_tool: str | None = None,
    ) -> DecisionReport:
        """Decide every action of the approval (an edit changes the first one).

        Raises ``ApprovalNotFoundError``, ``AlreadyDecidedError``, ``ApprovalExpiredError``,
        ``NotAuthorisedError`` or ``InvalidEditError``; nothing is claimed when it does.
        """
        async with self.writes.writing():
            now = self._clock()

            def check(approval: Approval) -> list[ActionDecision]:
                check_decider(approval, approver, now)
                return self._decisions(approval, decision, edited_tool)

            claimed = await self.store.claim_checked(approval_id, approver.subject, check, now)
            await self._record_decisions(claimed)
        return await self._settle(claimed)

    async def sweep(self, now: datetime | None = None, limit: int = 100) -> list[DecisionReport]:
        """Reject every pending approval past its maximum age and answer its requester."""
        at = now or self._clock()
        reports = []
        for approval in await self.store.find(
            statuses=[ApprovalStatus.PENDING], expired_at=at, limit=limit
        ):
            minutes = int((approval.expires_at - approval.created_at).total_seconds() // 60)
            reject = ActionDecision(
                "reject",
                message=f"Expired: no approver decided within {minutes} minutes. Nothing was done.",
            )
            try:
                claimed = await self.store.claim(
                    approval.approval_id,
                    EXPIRY_DECIDER,
                    [reject] * len(approval.actions),
                    at,
                )
            except ApprovalError:
                continue  # decided meanwhile by a person: not the sweeper's any more
            await self._record_decisions(claimed)
            reports.append(await self._settle(claimed))
        return reports

    async def withdraw(self, requester: Identity, thread_id: str) -> list[DecisionReport]:
        """The requester stopped the run on ``thread_id``: every approval of it still pending
        ends ``withdrawn`` (nothing runs) and, once every call of its step is done, the paused
        run resumes with its stop already set: the results of calls that ran are fed, and no
        model step follows. Only the requester's own approvals; one a person decided first is
        left alone (it runs as decided)."""
        now = self._clock()
        pending = [
            a
            for a in await self.store.find(
                statuses=[ApprovalStatus.PENDING], requester_subject=requester.subject, limit=500
            )
            if a.thread_id == thread_id
        ]
        reason = f"withdrawn by {requester.subject}: the requester stopped the request"
        reports = []
        for approval in pending:
            reject = ActionDecision("reject", message=f"Withdrawn: {reason}. Nothing was done.")
            try:
                claimed = await self.store.claim(
                    approval.approval_id, requester.subject, [reject] * len(approval.actions), now
                )
            except ApprovalError:
                continue  # decided (or expired) meanwhile: that decision stands
            await self._record_decisions(claimed, label="withdrawn")
            done = await self.store.finish(
                claimed.approval_id,
                ApprovalStatus.WITHDRAWN,
                {"result": ApprovalStatus.WITHDRAWN.value},
                reason=reason,
            )
            await self._record_finished(done)
            reports.append(await self._resume_batch(done))
        return reports

    async def finish_interrupted(self, grace: timedelta, limit: int = 100) -> list[DecisionReport]:
        """Finish every approval a crash left in flight for longer than ``grace``, then resume
        the runs whose steps are decided to the end but were never resumed.

        Each is taken over atomically (``store.reclaim``, ``store.claim_resume``), so
        concurrent sweepers on several instances finish it once; an approved call that already
        left opsbot is not sent again unless its idempotency key makes that safe (the audit log
        says what happened). Run the reconciler first.
        """
        now = self._clock()
        stale_before = now - grace
        reports = []
        in_flight = [s for s in ApprovalStatus if s.is_in_flight]
        for stuck in await self.store.find(statuses=in_flight, limit=limit):
            if stuck.decided_at is None or stuck.decided_at >= stale_before:
                continue  # may still be running on another instance
            taken = await self.store.reclaim(stuck.approval_id, stale_before, now)
            if taken is None:
                continue
            reports.append(await self._settle(taken, rerun=True))
        # A resume claimed by a crashed instance is claimed again only after RESUME_LEASE: a
        # model run may take a while, and a second resume would answer twice.
        for leader in await self.store.unresumed(now - max(grace, RESUME_LEASE), limit=limit):
            report = await self._resume_batch(leader)
            if report.result is not None:
                reports.append(report)
        return reports

    async def _settle(self, claimed: Approval, *, rerun: bool = False) -> DecisionReport:
        """Carry a claimed decision through: a rejection (or expiry) is final at once; an
        approved call runs now (``approved → executing → succeeded | failed | unknown``).
        Then, if it was the last open call of its step, the run resumes.

        From the approved call to the resume this is one registered run: a Stop pressed
        while the call is at its server lets it finish (it was approved) and the resume then
        takes no model step."""
        approval = claimed
        registered: RunStop | None = None
        try:
            async with self.writes.writing() as writing:
                # Once its calls went out, the rest waits for the other writes on their way
                approval, registered = await self._carry_out(approval, rerun, writing.done)
        except ApprovalError:
            # Moved on by another instance meanwhile (a recovering sweeper): it carries on.
            return DecisionReport(await self._current(approval))
        try:
            await self.writes.after_writes()  # others' writes first, then this follow-up
            return await self._resume_batch(approval, run=registered)
        finally:
            if registered is not None and self._runs is not None:
                await self._runs.finish(registered.run_id)

    async def _carry_out(
        self, approval: Approval, rerun: bool, calls_done: Callable[[], Awaitable[None]]
    ) -> tuple[Approval, RunStop | None]:
        """The decision's part of ``_settle``: final for a rejection, else run the call
        (``calls_done`` is awaited once it went out, before the approval is finished)."""
        registered: RunStop | None = None
        try:
            # Decided here (or by a crashed instance) but not yet run: nothing of it left
            # opsbot, so it runs as a fresh call, not as a rerun.
            unsent = approval.status in (ApprovalStatus.DECIDING, ApprovalStatus.APPROVED)
            if approval.status is ApprovalStatus.DECIDING:
                if all(d.type == "reject" for d in approval.decisions):
                    status = (
                        ApprovalStatus.EXPIRED
                        if approval.decided_by == EXPIRY_DECIDER
                        else ApprovalStatus.REJECTED
                    )
                    approval = await self.store.finish(
                        approval.approval_id, status, {"result": status.value}
                    )
                    await self._record_finished(approval)
                else:
                    # Approved: on to executing in one statement (one transaction per click
                    # fewer than deciding → approved → executing), before the call's checks.
                    approval = await self.store.advance(
                        approval.approval_id, ApprovalStatus.DECIDING, ApprovalStatus.EXECUTING
                    )
                    self.changes.changed(approval.approval_id)
            running = approval.status in (ApprovalStatus.APPROVED, ApprovalStatus.EXECUTING)
            if running and self._runs is not None:
                registered = await self._runs.start(approval.thread_id)
            if approval.status is ApprovalStatus.APPROVED:  # left there by an older instance
                approval = await self.store.advance(
                    approval.approval_id, ApprovalStatus.APPROVED, ApprovalStatus.EXECUTING
                )
                self.changes.changed(approval.approval_id)
                approval = await self._run_approved(approval, rerun=False, calls_done=calls_done)
            elif approval.status is ApprovalStatus.EXECUTING:
                approval = await self._run_approved(
                    approval, rerun=rerun and not unsent, calls_done=calls_done
                )
        except ApprovalError:
            if registered is not None and self._runs is not None:
                await self._runs.finish(registered.run_id)
            raise
        return approval, registered

    async def _run_approved(
        self,
        approval: Approval,
        *,
        rerun: bool,
        retried: bool = False,
        calls_done: Callable[[], Awaitable[None]] | None = None,
    ) -> Approval:
        """Run the approved call(s) of ``approval`` now, as the requester, and finish it from
        what the audit log says each write did; the results are stored for the resume.
        ``calls_done`` is awaited between the two (other writes first)."""
        failure: str | None = None
        tokens: dict[str, AccessToken] = {}
        try:
            requester = await self._identities(approval.requester_subject)
        except BrokerError as exc:
            requester = Identity(approval.requester_subject, approval.requester_chat_user)
            failure = f"the requester's access could not be confirmed: {exc}"
        if failure is None:
            tokens, failure = await self._requester_can_act(requester, [approval])
        decisions = list(approval.decisions)
        results: dict[str, Any] = {}
        run_failure: str | None = None
        if failure is None:
            events = await self._records.events(approval) if rerun else []
            for action, decision in zip(approval.actions, decisions, strict=True):
                if decision.type == "reject":
                    continue
                if rerun and not safe_to_send(approval, action, events):
                    continue  # it left opsbot before the crash: the audit log tells the rest
                args = decision.args if decision.type == "edit" and decision.args else action.args
                call = ApprovedCall(
                    thread_id=approval.thread_id,
                    approval_id=approval.batch,
                    call_id=action.tool_call_id,
                    tool=action.tool,
                    args=dict(args),
                    proposed_args=dict(action.args),
                )
                try:
                    results[action.tool_call_id] = await self._resumer.execute(
                        requester, call, tokens=tokens
                    )
                    crash_point("after_write")  # test only: the write ran, nothing saved yet
                except NoPendingApprovalError:
                    run_failure = (
                        "the thread is no longer waiting for this call, and no write is recorded"
                    )
                except Exception as exc:  # recorded; the outcome comes from the audit log
                    log.warning("approved call %s failed: %s", approval.approval_id, type(exc))
                    run_failure = f"running the call failed ({error_outcome(exc)})"
        if calls_done is not None:
            await calls_done()
        reason: str | None
        if failure is not None:
            status, reason = ApprovalStatus.FAILED, failure
        else:
            status, reason = await self._records.outcome(approval, decisions, run_failure)
        outcome: dict[str, Any] = {"reason": reason} if reason else {"result": status.value}
        results = {**(approval.outcome.get(TOOL_RESULTS) or {}), **results}
        if results:
            outcome[TOOL_RESULTS] = results
        if retried or approval.outcome.get(RETRIED):
            outcome[RETRIED] = True  # a never-applied write is run again once, not more
        done = await self.store.finish(approval.approval_id, status, outcome, reason=reason)
        await self._record_finished(done)
        return done

    async def _resume_batch(
        self, approval: Approval, *, run: RunStop | None = None
    ) -> DecisionReport:
        """Resume the paused run once every call of its step is decided and done (exactly one
        caller does: ``store.claim_resume``); the model gets the stored results of the calls
        that ran, and a refusal for the others. Otherwise this one waits. ``run``: the
        caller's registered run (its stop signal), kept open by the caller."""
        batch = await self.store.find(batch=approval.batch, limit=1000)
        # This approval as the batch's read just found it (not read again)
        current = next((a for a in batch if a.approval_id == approval.approval_id), None)
        if current is None:
            return DecisionReport(await self._current(approval))
        if not all(a.status.is_final for a in batch):
            return DecisionReport(current)
        now = self._clock()
        if not await self.store.claim_resume(approval.batch, now, now - RESUME_LEASE):
            return DecisionReport(current)
        first = batch[0]
        try:
            requester = await self._identities(first.requester_subject)
        except BrokerError:
            requester = Identity(first.requester_subject, first.requester_chat_user)
        decisions: list[dict[str, Any]] = []
        recorded: dict[str, dict[str, Any]] = {}
        for member in batch:
            stored = member.outcome.get(TOOL_RESULTS) or {}
            given = member.decisions or (ActionDecision("reject"),) * len(member.actions)
            for action, decision in zip(member.actions, given, strict=False):
                if decision.type == "reject":
                    message = decision.message or "Not approved."
                    decisions.append(
                        ActionDecision("reject", message=message).to_hitl(action, None)
                    )
                elif action.tool_call_id in stored:
                    recorded[action.tool_call_id] = stored[action.tool_call_id]
                    decisions.append(decision.to_hitl(action, None))
                elif member.status in (ApprovalStatus.SUCCEEDED, ApprovalStatus.UNKNOWN):
                    # It ran (or may have) but its result was lost in a crash: tell the model
                    # what the records say; sending it again is not the resume's to do.
                    recorded[action.tool_call_id] = result_note(
                        action.tool_call_id,
                        action.tool,
                        f"{action.tool} ran and succeeded; its result was not kept."
                        if member.status is ApprovalStatus.SUCCEEDED
                        else f"The outcome of {action.tool} is unknown: "
                        f"{member.outcome_reason or 'being reconciled'}.",
                        ok=member.status is ApprovalStatus.SUCCEEDED,
                    )
                    decisions.append(decision.to_hitl(action, None))
                else:
                    why = member.outcome_reason or "it could not be run"
                    refusal = ActionDecision("reject", message=f"Not executed: {why}")
                    decisions.append(refusal.to_hitl(action, None))
        result: Any = None
        # A step the requester withdrew (Stop) closes without another model step; any other
        # resume is registered as a run, so the requester's Stop reaches it too.
        stop: StopSignal | None = None
        registered: RunStop | None = None
        if any(a.status is ApprovalStatus.WITHDRAWN for a in batch):
            stop = ALREADY_STOPPED
        elif run is not None:
            stop = run
        elif self._runs is not None:
            registered = await self._runs.start(first.thread_id)
            stop = registered
        try:
            result = await self._resumer.resume(
                requester,
                first.thread_id,
                decisions,
                approval_id=first.batch,
                recorded=recorded,
                stop=stop,
            )
        except NoPendingApprovalError:
            pass  # resumed before (a crash after the resume, before it was recorded)
        except Exception as exc:  # the writes stand; the requester is told from the records
            log.warning("resume of batch %s failed: %s", first.batch, type(exc))
        finally:
            if registered is not None and self._runs is not None:
                await self._runs.finish(registered.run_id)
        await self.store.finish_resume(first.batch, self._clock())
        return DecisionReport(await self._current(approval), result)

    async def _current(self, approval: Approval) -> Approval:
        return await self.store.get(approval.approval_id) or approval

    def _decisions(
        self, approval: Approval, decision: ActionDecision, edited_tool: str | None
    ) -> list[ActionDecision]:
        if decision.type != "edit":
            return [decision] * len(approval.actions)
        first = approval.actions[0]
        args = validate_edit(first, decision.args or {}, self.tools, edited_tool)
        if args == first.args:
            return [ActionDecision("approve")] * len(approval.actions)
        return [ActionDecision("edit", args=args)] + [ActionDecision("approve")] * (
            len(approval.actions) - 1
        )

    async def _record_decisions(self, approval: Approval, label: str | None = None) -> None:
        for action, decision in zip(approval.actions, approval.decisions, strict=True):
            kind = label or ("expired" if approval.decided_by == EXPIRY_DECIDER else decision.type)
            await self.audit.record(
                EventKind.DECISION,
                **_audit_subject(approval, action.tool),
                approver=approval.decided_by,
                decision=kind,
                args=action.args,
                edited_args=decision.args if decision.type == "edit" else None,
                detail={"message": decision.message} if decision.message else None,
            )
        self.changes.changed(approval.approval_id)

    async def _record_finished(self, done: Approval) -> None:
        await self.audit.record(
            EventKind.APPROVAL_FINISHED,
            **_audit_subject(done, done.actions[0].tool),
            approver=done.decided_by,
            outcome=done.status.value,
            detail={"reason": done.outcome_reason} if done.outcome_reason else None,
        )
        self.changes.changed(done.approval_id)

    async def settle_unknown(self, limit: int = 100) -> list[DecisionReport]:
        """Move ``unknown`` approvals to ``succeeded``/``failed`` once the audit log knows
        (after ``opsbot reconcile`` found each write in, or missing from, the server's log).

        A write the server never applied is run again, once, when its idempotency key makes
        that safe (the server applies a key at most once): it then ends ``succeeded`` or
        ``failed`` like any call. A write without a key is not retried: it ends ``failed``
        with that reason.
        """
        reports = []
        for approval in await self.store.find(statuses=[ApprovalStatus.UNKNOWN], limit=limit):
            status, reason = await self._records.outcome(approval, list(approval.decisions))
            if status is ApprovalStatus.UNKNOWN:
                continue
            never_applied = await self._records.never_applied(approval)
            if never_applied == "keyed" and not approval.outcome.get(RETRIED):
                try:
                    taken = await self.store.advance(
                        approval.approval_id, ApprovalStatus.UNKNOWN, ApprovalStatus.EXECUTING
                    )
                except ApprovalError:
                    continue  # settled meanwhile by another instance
                done = await self._run_approved(taken, rerun=False, retried=True)
                reports.append(DecisionReport(done))
                continue
            if never_applied is not None:
                status = ApprovalStatus.FAILED
                reason = (
                    f"{reason}; it was retried once and still not applied"
                    if never_applied == "keyed"
                    else f"{reason}; it was not retried: the tool takes no idempotency key, "
                    "so a retry could apply it twice"
                )
            kept = {k: v for k, v in approval.outcome.items() if k in (TOOL_RESULTS, RETRIED)}
            outcome = {**kept, **({"reason": reason} if reason else {"result": status.value})}
            try:
                done = await self.store.finish(approval.approval_id, status, outcome, reason=reason)
            except ApprovalError:
                continue  # settled meanwhile by another instance
            await self._record_finished(done)
            reports.append(DecisionReport(done))
        return reports

    async def _requester_can_act(
        self, requester: Identity, approvals: list[Approval]
    ) -> tuple[dict[str, AccessToken], str | None]:
        """Mint fresh tokens for the requester (never the approver) on each write's server
        that takes one: the tokens by server (the calls carry them), or why the requester
        may not act. A server in another auth mode gets no exchanged token (the broker mints
        none for it); the requester's link was confirmed just before."""
        tokens: dict[str, AccessToken] = {}
        servers = {x.server for a in approvals for x in a.actions}
        for server in sorted(s for s in servers if self.tools.takes_exchanged_token(s)):
            try:
                await self._broker.invalidate(requester, server)
                tokens[server] = await self._broker.get_token(requester, server)
            except BrokerError as exc:
                refused = f"the requester's access to {server} was refused ({type(exc).__name__})"
                return {}, refused
        return tokens, None


__all__ = [
    "ApprovalService",
    "DecisionReport",
    "IdentityLookup",
    "InvalidEditError",
    "Resumer",
    "ToolCatalog",
]
