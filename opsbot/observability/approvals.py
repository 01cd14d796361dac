"""Approval metrics, taken from the audit trail as it is appended.

Wraps the audit sink: every proposal (``approval_requested``) and decision passes through
it on every instance, so counting here needs no hook in the approvals service. Time to
decision is measured against the proposal's own audit record (found in the sink, so a
decision on another instance than the proposal still counts).

Example::

    audit = AuditLog(ApprovalMetricsSink(SqlAuditSink(engine)))
"""

from __future__ import annotations

from audit.log import AuditEvent, AuditQuery, AuditSink, EventKind
from infra.observability import metrics as m


class ApprovalMetricsSink:
    """An ``AuditSink`` that counts proposals and decisions, then delegates."""

    def __init__(self, inner: AuditSink) -> None:
        self.inner = inner

    async def append(self, event: AuditEvent) -> None:
        await self.inner.append(event)
        if event.kind is EventKind.APPROVAL_REQUESTED:
            m.INTERRUPTS.labels(tool=event.tool or "unknown").inc()
        elif event.kind is EventKind.DECISION:
            m.DECISIONS.labels(decision=event.decision or "unknown").inc()
            await self._time_to_decision(event)

    async def _time_to_decision(self, event: AuditEvent) -> None:
        if event.approval_id is None:
            return
        requested = await self.inner.query(
            AuditQuery(
                approval_id=event.approval_id, kinds=(EventKind.APPROVAL_REQUESTED,), limit=1
            )
        )
        if requested:
            seconds = (event.at - requested[0].at).total_seconds()
            m.DECISION_SECONDS.observe(max(seconds, 0.0))

    async def query(self, q: AuditQuery) -> list[AuditEvent]:
        return await self.inner.query(q)

    async def unresolved_writes(self, limit: int = 200) -> list[AuditEvent]:
        return await self.inner.unresolved_writes(limit)
