"""Deciding approvals exactly once and resuming the requester's thread.

The flow of a decision: check the approver (group, self-approval, expiry) → validate edits →
**claim** (``pending → deciding``, one winner) → record the decision → make sure the
*requester* can still get tokens (fresh, never the approver's) → resume the thread through
the agent core with the decisions and the approval id (from which the write's idempotency key
is derived) → record the outcome. A requester whose access was revoked gets a rejection
instead: nothing is written and the approval ends ``failed`` with the reason.

Example::

    service = ApprovalService(store, audit_log, tools, agent, identities, broker)
    approval = await service.open(interrupt, requester)
    report = await service.decide(approver, approval.approval_id, ActionDecision("approve"))
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from agent_core.answer import Interrupt
from agent_core.binding import idempotency_key
from agent_core.errors import NoPendingApprovalError
from agent_core.policy import ToolPolicy
from agent_core.runs import ALREADY_STOPPED, RunRegistry, StopSignal
from approvals.errors import (
    ApprovalError,
    ApprovalNotFoundError,
    InvalidEditError,
)
from approvals.records import (
    EXPIRY_DECIDER,
    ActionDecision,
    ActionRequest,
    Approval,
    ApprovalStatus,
    ReadRef,
)
from approvals.rules import check_decider, validate_edit
from approvals.store import ApprovalStore
from audit.log import AuditLog, AuditQuery, EventKind, error_outcome
from broker.errors import BrokerError
from broker.types import Broker, Identity
from infra.clock import Clock, IdFactory, random_id, utc_now

log = logging.getLogger(__name__)

# Write outcomes after which the server certainly did not apply the write.
REFUSED_OUTCOMES = frozenset(
    {
        "error:ToolResultError",
        "error:ToolAuthError",
        "error:CredentialError",
        "error:CredentialUnavailableError",
    }
)

DEFAULT_MAX_AGE = timedelta(hours=1)


class Resumer(Protocol):
    """Resumes a paused thread with HITL decisions, as ``identity`` (the requester)."""

    async def resume(
        self,
        identity: Identity,
        thread_id: str,
        decisions: list[dict[str, Any]],
        *,
        approval_id: str,
        stop: StopSignal | None = None,
    ) -> Any: ...


class ToolCatalog(Protocol):
    """What the approvals need to know about tools (``agent_core.Agent`` provides it)."""

    @property
    def policy(self) -> ToolPolicy: ...

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        """The schema an approver's edit is validated against (without ``idempotency_key``)."""
        ...

    def is_allowed(self, name: str) -> bool: ...


IdentityLookup = Callable[[str], Awaitable[Identity]]
"""The requester's current identity (groups from the IdP directory) by subject."""


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
    ) -> None:
        # Resumed runs are registered here too, so the requester's Stop reaches them.
        self._runs = runs
        self.store = store
        self.audit = audit
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
        reads = tuple(ReadRef(step.tool, ref) for step in interrupt.reads for ref in step.ids)
        size = len(interrupt.action_requests)
        approvals: list[Approval] = []
        for index, request in enumerate(interrupt.action_requests):
            cls = self.tools.policy.classify(request.name)
            action = ActionRequest(
                tool=request.name,
                server=request.server or request.name.split("_", 1)[0],
                args=dict(request.args),
                description=request.description,
                tool_call_id=request.tool_call_id,
                approver_group=cls.approver_group or "",
                sensitive=cls.sensitive,
                input_schema=self.tools.tool_schema(request.name) or {},
            )
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
            await self.audit.record(
                EventKind.APPROVAL_REQUESTED,
                requester=requester.subject,
                thread_id=approval.thread_id,
                tool=action.tool,
                approval_id=approval.approval_id,
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
        approval = await self.store.get(approval_id)
        if approval is None:
            raise ApprovalNotFoundError(f"no approval {approval_id!r}")
        now = self._clock()
        check_decider(approval, approver, now)
        decisions = self._decisions(approval, decision, edited_tool)
        claimed = await self.store.claim(approval_id, approver.subject, decisions, now)
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
        ends ``withdrawn`` (nothing runs) and the paused run is closed without another model
        step. Only the requester's own approvals; one a person decided first is left alone."""
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
            reports.append(await self._run_batch(done, stop=ALREADY_STOPPED))
        return reports

    async def finish_interrupted(self, grace: timedelta, limit: int = 100) -> list[DecisionReport]:
        """Finish every approval a crash left in ``deciding`` for longer than ``grace``.

        Each is taken over atomically (``store.reclaim``), so concurrent sweepers on several
        instances finish it once; the idempotency key stops a write that already happened.
        Run the reconciler first: whether a half-done write happened is read from the audit log.
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
            if taken.status is ApprovalStatus.EXECUTING:
                # Crashed while its batch ran: run the batch's in-flight writes again (the
                # idempotency keys stop a second effect; the audit log tells what happened).
                report = await self._run_batch(taken, rerun=True)
            else:
                report = await self._settle(taken)
            reports.append(report)
        return reports

    async def _settle(self, claimed: Approval) -> DecisionReport:
        """Record this approval's own decision (``rejected``/``expired`` are final, an
        approve or edit is ``approved``), then run the batch if it was the last one open."""
        approval = claimed
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
                approval = await self.store.advance(
                    approval.approval_id, ApprovalStatus.DECIDING, ApprovalStatus.APPROVED
                )
        return await self._run_batch(approval)

    async def _run_batch(
        self, approval: Approval, *, rerun: bool = False, stop: StopSignal | None = None
    ) -> DecisionReport:
        """Resume the run once every approval of the batch is decided (exactly one caller
        does, by moving the approved ones to ``executing``); otherwise this one waits."""
        batch = await self.store.find(batch=approval.batch, limit=1000)
        if any(a.status in (ApprovalStatus.PENDING, ApprovalStatus.DECIDING) for a in batch):
            return DecisionReport(approval)  # the others are still waiting for a decision
        approved = any(a.status is ApprovalStatus.APPROVED for a in batch)
        if approved and not await self.store.start_batch(approval.batch):
            return DecisionReport(await self._current(approval))  # another caller runs it
        running_elsewhere = any(a.status is ApprovalStatus.EXECUTING for a in batch)
        if not approved and not rerun and running_elsewhere:
            return DecisionReport(await self._current(approval))
        batch = await self.store.find(batch=approval.batch, limit=1000)
        result, finished = await self._execute(batch, stop)
        mine = next((a for a in finished if a.approval_id == approval.approval_id), None)
        me = mine or await self._current(approval)
        others = tuple(a for a in finished if a.approval_id != approval.approval_id)
        return DecisionReport(me, result, others)

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
                requester=approval.requester_subject,
                thread_id=approval.thread_id,
                tool=action.tool,
                approval_id=approval.approval_id,
                approver=approval.decided_by,
                decision=kind,
                args=action.args,
                edited_args=decision.args if decision.type == "edit" else None,
                detail={"message": decision.message} if decision.message else None,
            )

    async def _execute(
        self, batch: list[Approval], stop: StopSignal | None = None
    ) -> tuple[Any, list[Approval]]:
        """Resume the thread with every call's decision, in order; finish the approvals
        that ran (``executing``) from what the audit log says each write did."""
        first = batch[0]
        running = [a for a in batch if a.status is ApprovalStatus.EXECUTING]
        failure: str | None = None
        try:
            requester = await self._identities(first.requester_subject)
        except BrokerError as exc:
            requester = Identity(first.requester_subject, first.requester_chat_user)
            failure = f"the requester's access could not be confirmed: {exc}"
        if running and failure is None:
            failure = await self._requester_can_act(requester, running)
        # One decision per call of the model step, in order (older rows: all in one record).
        pairs = [(a, x, d) for a in batch for x, d in zip(a.actions, a.decisions, strict=False)]
        decisions: list[dict[str, Any]] = []
        for approval, action, decision in pairs:
            if approval.status is not ApprovalStatus.EXECUTING:
                message = decision.message if decision.type == "reject" else ""
                decision = ActionDecision("reject", message=message or "Not approved.")
            elif failure is not None:
                decision = ActionDecision("reject", message=f"Not executed: {failure}")
            decisions.append(decision.to_hitl(action, None))
        result: Any = None
        resume_failure: str | None = None
        registered = None
        if stop is None and self._runs is not None:
            registered = stop = await self._runs.start(first.thread_id)
        try:
            result = await self._resumer.resume(
                requester, first.thread_id, decisions, approval_id=first.batch, stop=stop
            )
        except NoPendingApprovalError:
            # A retry after a crash: the thread already moved past the interrupt. The audit
            # log (completed by the reconciler if need be) says whether the write happened.
            resume_failure = "the thread was resumed before, and no write is recorded"
        except Exception as exc:  # recorded; the outcome comes from the audit log
            log.warning("resume of approval %s failed: %s", first.batch, type(exc))
            resume_failure = f"resuming the thread failed ({error_outcome(exc)})"
        finally:
            if registered is not None and self._runs is not None:
                await self._runs.finish(registered.run_id)
        finished: list[Approval] = []
        for approval in running:
            reason: str | None
            if failure is not None:
                status, reason = ApprovalStatus.FAILED, failure
            else:
                status, reason = await self._write_outcome(
                    approval, list(approval.decisions), resume_failure
                )
            outcome: dict[str, Any] = {"reason": reason} if reason else {"result": status.value}
            try:
                done = await self.store.finish(approval.approval_id, status, outcome, reason=reason)
            except ApprovalError:
                continue  # finished meanwhile (a recovering instance)
            await self._record_finished(done)
            finished.append(done)
        return result, finished

    async def _record_finished(self, done: Approval) -> None:
        await self.audit.record(
            EventKind.APPROVAL_FINISHED,
            requester=done.requester_subject,
            thread_id=done.thread_id,
            tool=done.actions[0].tool,
            approval_id=done.approval_id,
            approver=done.decided_by,
            outcome=done.status.value,
            detail={"reason": done.outcome_reason} if done.outcome_reason else None,
        )

    async def _write_outcome(
        self,
        approval: Approval,
        decisions: list[ActionDecision],
        resume_failure: str | None = None,
    ) -> tuple[ApprovalStatus, str | None]:
        """What really happened to the approved writes, from the audit log's own records.

        ``succeeded`` when every approved call succeeded; ``failed`` (with the server's
        reason) when one was refused; ``unknown`` when one may or may not have happened — or
        never left opsbot (its server unreachable at resume): then a ``write_pending`` record
        is added so ``opsbot reconcile`` settles it against the server's change log.
        """
        events = await self.audit.query(
            AuditQuery(
                approval_id=approval.batch,
                kinds=(EventKind.WRITE_PENDING, EventKind.WRITE_OUTCOME),
                limit=1000,
            )
        )
        failed: list[str] = []
        unknown: list[str] = []
        for index, (action, decision) in enumerate(zip(approval.actions, decisions, strict=True)):
            if decision.type == "reject":
                continue
            keys = {
                idempotency_key(approval.batch, action.tool_call_id),
                f"nokey:{action.tool_call_id}",
            }
            mine = [e for e in events if e.idempotency_key in keys]
            outcomes = [e for e in mine if e.kind is EventKind.WRITE_OUTCOME]
            if any(e.outcome == "success" for e in outcomes):
                continue
            if outcomes and outcomes[-1].outcome in REFUSED_OUTCOMES:
                last = outcomes[-1]
                failed.append(
                    str(last.detail.get("reason") or f"the {action.server} server refused")
                )
            elif outcomes and outcomes[-1].outcome == "not_applied":
                failed.append(f"the {action.server} server has no record of the write")
            elif mine:
                unknown.append(
                    str(
                        (outcomes[-1].detail.get("reason") if outcomes else None)
                        or f"the {action.server} server did not confirm the write"
                    )
                )
            elif resume_failure is not None:
                # The resume broke before this call left opsbot (its pending record is
                # written first): nothing was sent.
                failed.append(resume_failure)
            else:
                await self._record_unsent(approval, index, action, decision)
                unknown.append(f"the {action.server} server could not be reached")
        if failed:
            return ApprovalStatus.FAILED, "; ".join(dict.fromkeys(failed))
        if unknown:
            return ApprovalStatus.UNKNOWN, (
                "; ".join(dict.fromkeys(unknown)) + " — outcome unknown, being reconciled"
            )
        return ApprovalStatus.SUCCEEDED, None

    async def _record_unsent(
        self, approval: Approval, index: int, action: ActionRequest, decision: ActionDecision
    ) -> None:
        """A ``write_pending`` record for an approved call that never left opsbot, so the
        reconciler checks the server (by the key the call would have carried)."""
        await self.audit.write_pending(
            requester=approval.requester_subject,
            thread_id=approval.thread_id,
            tool=action.tool,
            args=decision.args if decision.type == "edit" and decision.args else action.args,
            idempotency_key=idempotency_key(approval.batch, action.tool_call_id),
            approval_id=approval.batch,
            approver=approval.decided_by,
            decision=decision.type,
        )

    async def settle_unknown(self, limit: int = 100) -> list[DecisionReport]:
        """Move ``unknown`` approvals to ``succeeded``/``failed`` once the audit log knows
        (after ``opsbot reconcile`` found each write in, or missing from, the server's log)."""
        reports = []
        for approval in await self.store.find(statuses=[ApprovalStatus.UNKNOWN], limit=limit):
            status, reason = await self._write_outcome(approval, list(approval.decisions))
            if status is ApprovalStatus.UNKNOWN:
                continue
            try:
                done = await self.store.finish(
                    approval.approval_id,
                    status,
                    {"reason": reason} if reason else {"result": status.value},
                    reason=reason,
                )
            except ApprovalError:
                continue  # settled meanwhile by another instance
            await self._record_finished(done)
            reports.append(DecisionReport(done))
        return reports

    async def _requester_can_act(
        self, requester: Identity, approvals: list[Approval]
    ) -> str | None:
        """Mint fresh tokens for the requester (never the approver) on each write's server."""
        for server in sorted({x.server for a in approvals for x in a.actions}):
            try:
                await self._broker.invalidate(requester, server)
                await self._broker.get_token(requester, server)
            except BrokerError as exc:
                return f"the requester's access to {server} was refused ({type(exc).__name__})"
        return None


__all__ = [
    "ApprovalService",
    "DecisionReport",
    "IdentityLookup",
    "InvalidEditError",
    "Resumer",
    "ToolCatalog",
]
