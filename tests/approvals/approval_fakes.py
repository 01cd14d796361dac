"""Fakes for approval tests: a counting executor behind a fake resumer, a revocable broker."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from agent_core.answer import ActionRequest as AgentAction
from agent_core.answer import Interrupt, ReadStep, ReviewConfig
from agent_core.approved_calls import ApprovedCall
from agent_core.binding import idempotency_key
from agent_core.policy import ToolPolicy
from approvals import MemoryApprovalStore
from approvals.service import ApprovalService
from audit import AuditLog, MemoryAuditSink
from broker.errors import AccessRevokedError, BrokerError
from broker.types import AccessToken, ChatUser, Identity, TokensByServer

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

DIRECTORY = {
    "alice": frozenset({"team-payments"}),
    "bob": frozenset({"team-payments", "ticket-leads"}),
    "carol": frozenset({"team-platform", "ticket-leads", "sre"}),
    "dave": frozenset({"team-platform"}),
    "mallory": frozenset({"team-search"}),
}

CLOSE_SCHEMA = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
        "resolution": {"type": "string", "enum": ["fixed", "duplicate", "wontfix"]},
    },
    "required": ["key", "resolution"],
}
COMMENT_SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "body": {"type": "string", "minLength": 1}},
    "required": ["key", "body"],
}


def identity(subject: str) -> Identity:
    return Identity(subject, ChatUser("slack", "T1", f"U-{subject}"), "", DIRECTORY[subject])


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


class Catalog:
    def __init__(self) -> None:
        self.policy = ToolPolicy.load()

    def is_allowed(self, name: str) -> bool:
        return self.policy.is_allowed(name)

    def takes_exchanged_token(self, server: str) -> bool:
        return True  # ticketing, as the reference servers are

    def tool_schema(self, tool: str) -> dict[str, Any] | None:
        return {
            "ticketing_close_ticket": CLOSE_SCHEMA,
            "ticketing_add_comment": COMMENT_SCHEMA,
        }.get(tool)


@dataclass
class CountingExecutor:
    """The ticketing server's write path: counts calls, deduplicates on the idempotency key."""

    calls: list[tuple[str, str, dict[str, Any], str]] = field(default_factory=list)
    effects: Counter[str] = field(default_factory=Counter)

    def execute(self, subject: str, tool: str, args: dict[str, Any], key: str) -> None:
        self.calls.append((subject, tool, dict(args), key))
        self.effects[key] = 1  # a replayed key changes nothing

    @property
    def executions(self) -> int:
        return len(self.effects)


@dataclass
class FakeResumer:
    """Stands in for ``Agent.execute``/``Agent.resume``: runs each approved call through the
    executor on its decision; a resume runs only what no recorded result covers."""

    executor: CountingExecutor
    interrupts: dict[str, Interrupt] = field(default_factory=dict)
    resumes: list[tuple[str, str, list[dict[str, Any]]]] = field(default_factory=list)
    # Each approved call run on its own decision, and the results each resume was fed.
    executed: list[tuple[str, str, ApprovedCall]] = field(default_factory=list)
    recorded: list[dict[str, Any]] = field(default_factory=list)
    # The fresh tokens (by server) each approved call was handed.
    tokens: list[dict[str, AccessToken]] = field(default_factory=list)
    # Whether each resume's stop signal was set when it ran (None: resumed without one).
    stopped: list[bool | None] = field(default_factory=list)
    fail_with: Exception | None = None
    # Audited like the agent's ``AuditObserver``: pending before, outcome after each write.
    audit: AuditLog | None = None
    # The server's answer per write: "success" or an ``error:<class>`` with a reason.
    answers: list[tuple[str, str | None]] = field(default_factory=list)
    # Raised by ``resume`` only (e.g. ``CancelledError``: the process dies mid-resume).
    crash_resume: BaseException | None = None
    # Whether the tool takes an idempotency key (the audit then records the key, else none).
    keyed: bool = True

    async def execute(
        self, identity: Identity, call: ApprovedCall, *, tokens: TokensByServer | None = None
    ) -> dict[str, Any]:
        """One approved call, now: audited, then applied (once per idempotency key)."""
        self.executed.append((identity.subject, call.thread_id, call))
        self.tokens.append(dict(tokens or {}))
        await asyncio.sleep(0)
        if self.fail_with is not None:
            raise self.fail_with
        await self._write(
            identity, call.thread_id, call.tool, dict(call.args), call.call_id, call.approval_id
        )
        return {"type": "tool", "data": {"content": f"ran {call.tool}", "id": call.call_id}}

    async def resume(
        self,
        identity: Identity,
        thread_id: str,
        decisions: list[dict[str, Any]],
        *,
        approval_id: str,
        recorded: Mapping[str, Any] | None = None,
        stop: Any = None,
    ) -> Any:
        self.resumes.append((identity.subject, thread_id, decisions))
        self.recorded.append(dict(recorded or {}))
        self.stopped.append(None if stop is None else await stop.requested())
        await asyncio.sleep(0)
        if self.crash_resume is not None:
            crash, self.crash_resume = self.crash_resume, None
            raise crash
        if self.fail_with is not None:
            raise self.fail_with
        interrupt = self.interrupts[thread_id]
        for request, decision in zip(interrupt.action_requests, decisions, strict=True):
            if decision["type"] == "reject" or request.tool_call_id in (recorded or {}):
                continue  # the graph feeds a recorded result instead of calling the tool
            args = decision["edited_action"]["args"] if decision["type"] == "edit" else request.args
            await self._write(
                identity, thread_id, request.name, args, request.tool_call_id, approval_id
            )
        return {"thread_id": thread_id, "decisions": decisions}

    async def _write(
        self,
        identity: Identity,
        thread_id: str,
        tool: str,
        args: dict[str, Any],
        tool_call_id: str,
        approval_id: str,
    ) -> None:
        key = idempotency_key(approval_id, tool_call_id) if self.keyed else f"nokey:{tool_call_id}"
        pending = None
        if self.audit is not None:
            pending = await self.audit.write_pending(
                requester=identity.subject,
                thread_id=thread_id,
                tool=tool,
                args=args,
                idempotency_key=key,
                approval_id=approval_id,
            )
        outcome, reason = self.answers.pop(0) if self.answers else ("success", None)
        if outcome == "success":
            self.executor.execute(identity.subject, tool, args, key)
        if pending is not None and self.audit is not None and outcome != "no-outcome":
            await self.audit.write_outcome(
                pending, outcome=outcome, detail={"reason": reason} if reason else None
            )


class YieldingStore:
    """Delegates to a real store, yielding to the event loop around every call, so that
    concurrent decisions really interleave (the memory store alone never suspends)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(0)
            result = await method(*args, **kwargs)
            await asyncio.sleep(0)
            return result

        return call


class FakeBroker:
    def __init__(self) -> None:
        self.revoked: set[str] = set()
        self.minted: list[tuple[str, str]] = []
        self.invalidated: list[tuple[str, str]] = []

    async def get_token(self, identity: Identity, server: str) -> AccessToken:
        if identity.subject in self.revoked:
            raise AccessRevokedError(f"{identity.subject} has no access any more")
        self.minted.append((identity.subject, server))
        return AccessToken("t0ken", f"aud:{server}", T0 + timedelta(hours=1))

    async def invalidate(self, identity: Identity, server: str) -> None:
        self.invalidated.append((identity.subject, server))


async def lookup_identity(subject: str) -> Identity:
    if subject not in DIRECTORY:
        raise BrokerError(f"unknown subject {subject}")
    return identity(subject)


def make_interrupt(
    thread_id: str = "thr-1",
    tool: str = "ticketing_close_ticket",
    args: dict[str, Any] | None = None,
    n_actions: int = 1,
) -> Interrupt:
    args = args or {"key": "PAY-7", "resolution": "fixed"}
    return Interrupt(
        thread_id=thread_id,
        action_requests=[
            AgentAction(
                name=tool,
                args=args,
                description=f"{tool} {i}",
                tool_call_id=f"call-{i}",
                server="ticketing",
            )
            for i in range(n_actions)
        ],
        review_configs=[
            ReviewConfig(action_name=tool, allowed_decisions=["approve", "edit", "reject"])
        ],
        reads=[ReadStep(tool="ticketing_get_ticket", args={"key": "PAY-7"}, ids=["PAY-7"])],
        model_used="scripted",
    )


@dataclass
class Harness:
    service: ApprovalService
    store: MemoryApprovalStore
    sink: MemoryAuditSink
    executor: CountingExecutor
    resumer: FakeResumer
    broker: FakeBroker
    clock: Clock

    async def open(self, requester: str = "alice", **kwargs: Any) -> str:
        interrupt = make_interrupt(**kwargs)
        self.resumer.interrupts[interrupt.thread_id] = interrupt
        approval = await self.service.open(interrupt, identity(requester))
        return approval.approval_id


def build_harness(store: Any = None) -> Harness:
    clock = Clock()
    ids = itertools.count()
    sink = MemoryAuditSink()
    executor = CountingExecutor()
    resumer = FakeResumer(executor)
    broker = FakeBroker()
    store = store or MemoryApprovalStore()
    audit = AuditLog(sink, clock=clock, new_id=lambda: f"ev-{next(ids)}")
    resumer.audit = audit
    service = ApprovalService(
        YieldingStore(store),
        audit,
        Catalog(),
        resumer,
        lookup_identity,
        broker,
        clock=clock,
    )
    return Harness(service, store, sink, executor, resumer, broker, clock)
