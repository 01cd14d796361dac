"""No interleaving of decide, expire (sweep), resume retries and crashes writes twice.

A hypothesis state machine drives the real ``ApprovalService`` and ``MemoryApprovalStore``
against a counting executor that plays the ticketing server (it deduplicates on the
idempotency key, as the server does).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from approval_fakes import build_harness, identity
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from agent_core.binding import idempotency_key
from approvals import ActionDecision, ApprovalError, ApprovalStatus

DECISIONS = st.sampled_from(
    [
        ActionDecision("approve"),
        ActionDecision("reject", message="no"),
        ActionDecision("edit", args={"key": "PAY-7", "resolution": "duplicate"}),
        ActionDecision("edit", args={"key": "PAY-7", "resolution": "bogus"}),  # invalid
    ]
)
PEOPLE = st.sampled_from(["alice", "bob", "carol", "dave"])


class ApprovalLifecycle(RuleBasedStateMachine):
    approvals = Bundle("approvals")

    @initialize()
    def setup(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.h = build_harness()
        self.opened = 0
        self.injected: dict[str, int] = {}  # writes a simulated crash sent, per key

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.loop.close()

    @rule(target=approvals, requester=PEOPLE)
    def open(self, requester: str) -> str:
        self.opened += 1
        return str(self.run(self.h.open(requester, thread_id=f"thr-{self.opened}")))

    @rule(approval=approvals, approver=PEOPLE, decision=DECISIONS)
    def decide(self, approval: str, approver: str, decision: ActionDecision) -> None:
        with contextlib.suppress(ApprovalError):
            self.run(self.h.service.decide(identity(approver), approval, decision))

    @rule(approvals=st.lists(approvals, min_size=1, max_size=4), approver=PEOPLE)
    def concurrent_clicks(self, approvals: list[str], approver: str) -> None:
        async def clicks() -> None:
            await asyncio.gather(
                *(
                    self.h.service.decide(identity(a), approval, ActionDecision("approve"))
                    for approval in approvals
                    for a in (approver, "bob", "carol")
                ),
                return_exceptions=True,
            )

        self.run(clicks())

    @rule(approval=approvals, approver=PEOPLE)
    def crash_after_claim(self, approval: str, approver: str) -> None:
        """A decision whose process died right after winning the claim."""
        with contextlib.suppress(ApprovalError):
            self.run(
                self.h.store.claim(approval, approver, [ActionDecision("approve")], self.h.clock())
            )

    @rule(approval=approvals)
    def crash_after_write(self, approval: str) -> None:
        """The write reached the server but the process died before finishing the approval."""
        current = self.run(self.h.store.get(approval))
        if (
            current.status is ApprovalStatus.DECIDING
            and current.decided_by != "system:expiry"
            and any(d.type != "reject" for d in current.decisions)
        ):
            key = idempotency_key(approval, current.actions[0].tool_call_id)
            self.injected[key] = self.injected.get(key, 0) + 1
            self.h.executor.execute(current.requester_subject, current.actions[0].tool, {}, key)

    @rule(grace_minutes=st.integers(min_value=0, max_value=10))
    def finish_interrupted(self, grace_minutes: int) -> None:
        """A sweeper's recovery pass: finish what crashed claims left deciding."""
        self.run(self.h.service.finish_interrupted(timedelta(minutes=grace_minutes)))

    @rule(minutes=st.integers(min_value=1, max_value=40))
    def time_passes(self, minutes: int) -> None:
        self.h.clock.advance(minutes=minutes)

    @rule()
    def sweep(self) -> None:
        self.run(self.h.service.sweep())

    @rule(approval=consumes(approvals))
    def forget(self, approval: str) -> None:
        """Stop touching one approval (keeps the bundle small)."""

    @invariant()
    def no_write_twice(self) -> None:
        if not hasattr(self, "h"):
            return
        # What the service itself sent (crash simulations excluded), per idempotency key.
        sent: dict[str, int] = {}
        for _subject, _tool, _args, key in self.h.executor.calls:
            sent[key] = sent.get(key, 0) + 1
        for key, n in self.injected.items():
            sent[key] -= n
        approvals = self.run(self.h.store.find(limit=1000))
        for a in approvals:
            key = idempotency_key(a.approval_id, a.actions[0].tool_call_id)
            by_service = sent.get(key, 0)
            # Only a retry of a crashed claim may send a write a second time, and then with
            # the same key, which the server drops.
            assert by_service <= 1 + self.injected.get(key, 0)
            if self.injected.get(key, 0) == 0:
                assert by_service <= 1
            if a.status in (
                ApprovalStatus.REJECTED,
                ApprovalStatus.EXPIRED,
                ApprovalStatus.PENDING,
            ):
                assert by_service == 0
            if a.status is ApprovalStatus.SUCCEEDED:
                assert by_service == 1
        # Writes always ran as the requester.
        by_key = {
            idempotency_key(a.approval_id, a.actions[0].tool_call_id): a.requester_subject
            for a in approvals
        }
        assert all(by_key[key] == subject for subject, _t, _a, key in self.h.executor.calls)


TestApprovalLifecycle = ApprovalLifecycle.TestCase
TestApprovalLifecycle.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
