"""What the audit log says of an approval's writes: sent or not, with which key, how they ended.

The approvals decide an approved write's fate from these records, never from memory: after a
crash, or on another instance, the records are all there is. A write gets a ``write_pending``
record before it leaves opsbot and a ``write_outcome`` after, joined by its key
(``audit.observer.write_key``: its idempotency key, or its tool call id when it had none).

Example::

    records = WriteRecords(audit)
    events = await records.events(approval)
    if safe_to_send(approval, action, events): ...
    status, reason = await records.outcome(approval, decisions)
"""

from __future__ import annotations

from agent_core.binding import idempotency_key
from approvals.records import ActionDecision, ActionRequest, Approval, ApprovalStatus
from audit.log import AuditEvent, AuditLog, AuditQuery, EventKind
from audit.observer import write_key

__all__ = ["REFUSED_OUTCOMES", "WriteRecords", "call_events", "safe_to_send"]

# Write outcomes after which the server certainly did not apply the write.
REFUSED_OUTCOMES = frozenset(
    {
        "error:ToolResultError",
        "error:ToolAuthError",
        "error:CredentialError",
        "error:CredentialUnavailableError",
    }
)


def call_events(
    events: list[AuditEvent], approval: Approval, action: ActionRequest
) -> list[AuditEvent]:
    """The records of ``action``'s call among an approval's ``events``, in log order."""
    keyed = idempotency_key(approval.batch, action.tool_call_id)
    keys = (keyed, write_key(None, action.tool_call_id))
    return [e for e in events if e.idempotency_key in keys]


def safe_to_send(approval: Approval, action: ActionRequest, events: list[AuditEvent]) -> bool:
    """After a crash: send the call (again) only if it never left opsbot, or if its
    idempotency key makes the server apply it at most once and no outcome is recorded."""
    mine = call_events(events, approval, action)
    if not mine:
        return True
    key = idempotency_key(approval.batch, action.tool_call_id)
    keyed = any(e.idempotency_key == key for e in mine)
    return keyed and not any(e.kind is EventKind.WRITE_OUTCOME for e in mine)


def _sent_since_last_outcome(events: list[AuditEvent]) -> bool:
    """Whether a ``write_pending`` record follows the last outcome (events in log order)."""
    last = max((i for i, e in enumerate(events) if e.kind is EventKind.WRITE_OUTCOME), default=-1)
    return any(e.kind is EventKind.WRITE_PENDING for e in events[last + 1 :])


class WriteRecords:
    """Reads (and, for a write that never left opsbot, completes) an approval's records."""

    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit

    async def events(self, approval: Approval) -> list[AuditEvent]:
        """Every ``write_pending`` and ``write_outcome`` record of ``approval``'s batch."""
        return await self.audit.query(
            AuditQuery(
                approval_id=approval.batch,
                kinds=(EventKind.WRITE_PENDING, EventKind.WRITE_OUTCOME),
                limit=1000,
            )
        )

    async def outcome(
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
        events = await self.events(approval)
        failed: list[str] = []
        unknown: list[str] = []
        for action, decision in zip(approval.actions, decisions, strict=True):
            if decision.type == "reject":
                continue
            mine = call_events(events, approval, action)
            outcomes = [e for e in mine if e.kind is EventKind.WRITE_OUTCOME]
            if any(e.outcome == "success" for e in outcomes):
                continue
            if _sent_since_last_outcome(mine):
                # Sent again (a retry) and not heard back yet: the older outcome is stale.
                unknown.append(f"the {action.server} server did not confirm the write")
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
                await self._record_unsent(approval, action, decision)
                unknown.append(f"the {action.server} server could not be reached")
        if failed:
            return ApprovalStatus.FAILED, "; ".join(dict.fromkeys(failed))
        if unknown:
            return ApprovalStatus.UNKNOWN, (
                "; ".join(dict.fromkeys(unknown)) + " — outcome unknown, being reconciled"
            )
        return ApprovalStatus.SUCCEEDED, None

    async def _record_unsent(
        self, approval: Approval, action: ActionRequest, decision: ActionDecision
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

    async def never_applied(self, approval: Approval) -> str | None:
        """``"keyed"`` when every approved call's last outcome is "the server has no record"
        and each was sent with its idempotency key (or never sent at all); ``"unkeyed"`` when
        one of them went without a key; ``None`` when not every call was never applied."""
        events = await self.events(approval)
        kinds: set[str] = set()
        for action, decision in zip(approval.actions, approval.decisions, strict=True):
            if decision.type == "reject":
                continue
            key = idempotency_key(approval.batch, action.tool_call_id)
            mine = call_events(events, approval, action)
            outcomes = [e for e in mine if e.kind is EventKind.WRITE_OUTCOME]
            if not outcomes or outcomes[-1].outcome != "not_applied":
                return None
            if _sent_since_last_outcome(mine):
                return None
            kinds.add("unkeyed" if any(e.idempotency_key != key for e in mine) else "keyed")
        if not kinds:
            return None
        return "unkeyed" if "unkeyed" in kinds else "keyed"
