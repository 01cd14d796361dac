"""A scripted stand-in for ``assistant.service.Assistant`` (the Slack adapter's only dependency).

It keeps the core's observable rules the adapter must render: unlinked users, thread
ownership, approver groups, one decision per approval, edit validation, expiry.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from agent_core.threads import MemoryThreadStore
from assistant.types import (
    AlreadyDecided,
    Answer,
    AnswerDelta,
    Answered,
    ApprovalNotice,
    ApprovalRequested,
    ApprovalSummary,
    ApprovalView,
    Approve,
    AssistantPort,
    ChatUser,
    ConnectRefused,
    Decided,
    Decision,
    DecisionNotifier,
    DecisionOutcome,
    Edit,
    Expired,
    InvalidEdit,
    Linked,
    LinkRequired,
    NotAuthorised,
    NoticeHandler,
    PlatformRef,
    Refused,
    Remembered,
    Reply,
    RunEvents,
    ServerConnected,
    ServerConnection,
    ServerConnectRequired,
    Source,
    StopResult,
    ToolCallFinished,
    ToolCallStarted,
    UserStatus,
)
from broker.errors import InvalidStateError

UPDATE_TICKET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ticket_id": {"type": "string", "description": "e.g. PAY-1"},
        "status": {"type": "string", "enum": ["open", "in_progress", "closed"]},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        "comment": {"type": "string"},
    },
    "required": ["ticket_id", "status"],
}


@dataclass
class Person:
    subject: str
    email: str
    groups: frozenset[str]


@dataclass
class FakeAssistant:
    """Implements ``AssistantPort`` (mypy checks it: see ``_checked`` below)."""

    now: datetime = field(default_factory=lambda: datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    people: dict[tuple[str, str], Person] = field(default_factory=dict)
    threads: MemoryThreadStore = field(default_factory=MemoryThreadStore)
    approvals: dict[str, ApprovalView] = field(default_factory=dict)
    executed: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    messages: list[tuple[ChatUser, PlatformRef, str]] = field(default_factory=list)
    decisions: list[tuple[ChatUser, str, Decision]] = field(default_factory=list)
    run_delay: float = 0.0
    # Answers are "written" sentence by sentence (an ``AnswerDelta`` each, to a listening
    # adapter) with this pause between them, as a streaming model would; None: one piece.
    stream_answers: float | None = None
    decide_delay: float = 0.0
    memory: dict[ChatUser, str] = field(default_factory=dict)
    # Cross-platform notices waiting per platform (tests put them with ``notify_platform``).
    notices: dict[str, list[ApprovalNotice]] = field(default_factory=dict)
    # The platform each linked (team, user) is on (people are keyed without it).
    platforms: dict[tuple[str, str], str] = field(default_factory=dict)
    servers: tuple[str, ...] = ("ticketing", "docs")
    unreachable: dict[str, str] = field(default_factory=dict)  # server → problem shown
    stops: list[tuple[ChatUser, PlatformRef]] = field(default_factory=list)
    feedback: list[tuple[ChatUser, PlatformRef, bool]] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def link(self, chat_user: ChatUser, subject: str, groups: set[str] | None = None) -> None:
        self.people[(chat_user.team_id, chat_user.user_id)] = Person(
            subject, f"{subject}@example.com", frozenset(groups or ())
        )
        self.platforms[(chat_user.team_id, chat_user.user_id)] = chat_user.platform

    def _person(self, chat_user: ChatUser) -> Person | None:
        return self.people.get((chat_user.team_id, chat_user.user_id))

    async def handle_message(
        self,
        chat_user: ChatUser,
        ref: PlatformRef,
        text: str,
        *,
        events: RunEvents | None = None,
    ) -> Reply:
        self.messages.append((chat_user, ref, text))
        person = self._person(chat_user)
        if person is None:
            return LinkRequired(await self.link_url(chat_user))
        thread = await self.threads.get_or_create(ref, person.subject)
        if thread.owner_subject != person.subject:
            return Refused(
                "This conversation belongs to someone else; mention me in a new thread "
                "to start your own."
            )
        call_id = f"call-{len(self.messages)}"
        if events is not None:  # the one read every scripted answer is "based on"
            await events(
                ToolCallStarted(
                    call_id, "ticketing", "ticketing_get_ticket", "ticketing · get ticket PAY-1"
                )
            )
        if self.run_delay:
            await asyncio.sleep(self.run_delay)
        if events is not None:
            await events(ToolCallFinished(call_id, True))
        words = text.split()
        if words[:1] == ["update"] and len(words) >= 3:
            return self._propose(chat_user, ref, person, words[1], words[2:])
        if words[:1] == ["runbook"]:  # needs docs, an ``auth: oauth`` server nobody connected
            return ServerConnectRequired(
                "docs",
                self.connect_url(chat_user, "docs"),
                Answer(f"PAY-1 is open; its runbook is in docs. You asked: {text}"),
            )
        if words[:1] == ["long"]:
            body = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum " * 40 for i in range(40))
            return Answered(Answer(body, sources=[Source("docs", "runbook-1", None)]))
        answer = (
            f"PAY-1 is open. It was filed by the payments team. Its runbook is linked below. "
            f"You asked: {text}"
            if self.stream_answers is not None
            else f"PAY-1 is open. You asked: {text}"
        )
        if events is not None and self.stream_answers is not None:
            shown = ""
            for sentence in answer.split(". ")[:-1]:  # whole sentences; the rest at the end
                shown += f"{sentence}. "
                await events(AnswerDelta(f"{sentence}. ", shown))
                await asyncio.sleep(self.stream_answers)
        return Answered(
            Answer(
                answer,
                sources=[Source("ticketing", "PAY-1", "http://tickets.test/PAY-1")],
                caveats=["Ticket data may be a minute old."],
            )
        )

    def _propose(
        self,
        chat_user: ChatUser,
        ref: PlatformRef,
        person: Person,
        ticket: str,
        pairs: list[str],
    ) -> Reply:
        args: dict[str, Any] = {"ticket_id": ticket}
        for pair in pairs:
            key, _, value = pair.partition("=")
            args[key] = int(value) if value.isdigit() else value
        approval_id = f"ap{next(self._ids)}"
        view = ApprovalView(
            approval_id=approval_id,
            tool="ticketing_update_ticket",
            server="ticketing",
            args=args,
            requester=person.email,
            requester_chat_user=chat_user,
            requester_ref=ref,
            reads=[f"ticketing_get_ticket {ticket}"],
            expires_at=self.now + timedelta(hours=1),
            input_schema=UPDATE_TICKET_SCHEMA,
            description="Update a ticket's status or priority.",
        )
        self.approvals[approval_id] = view
        summary = ApprovalSummary(approval_id, view.tool, view.server, view.expires_at)
        return ApprovalRequested(Answer(f"I can update {ticket} once approved."), summary)

    async def decide(
        self, approver: ChatUser, approval_id: str, decision: Decision
    ) -> DecisionOutcome:
        self.decisions.append((approver, approval_id, decision))
        if self.decide_delay:
            await asyncio.sleep(self.decide_delay)
        person = self._person(approver)
        if person is None:
            return LinkRequired(await self.link_url(approver))
        async with self._lock:
            view = self.approvals.get(approval_id)
            if view is None:
                return NotAuthorised("no such approval")
            if "ticket-leads" not in person.groups:
                return NotAuthorised("only members of ticket-leads may approve ticket changes")
            if view.status != "pending":
                return AlreadyDecided(view.decided_by or "someone")
            if self.now >= view.expires_at:
                return Expired()
            args = view.args
            if isinstance(decision, Edit):
                errors = _validate(decision.args)
                if errors:
                    return InvalidEdit(errors)
                args = decision.args
            label = {Approve: "approved", Edit: "edited"}.get(type(decision), "rejected")
            self.approvals[approval_id] = replace(
                view,
                status=label,
                decided_by=person.email,
                args=args,
                original_args=view.args if args != view.args else None,
                edited_by=person.email if args != view.args else None,
            )
        if label == "rejected":
            result: Reply = Refused("The change was rejected; nothing was written.")
            outcome = "rejected"
        else:
            self.executed.append((view.tool, args, view.requester))
            result = Answered(Answer(f"Updated {args['ticket_id']}: status={args['status']}."))
            outcome = label
        return Decided(approval_id, label, person.email, outcome, view.requester_ref, result)

    async def stop(self, chat_user: ChatUser, ref: PlatformRef) -> StopResult:
        """Recorded; the fake's runs cannot be stopped (they are scripted)."""
        self.stops.append((chat_user, ref))
        return StopResult()

    async def record_feedback(self, chat_user: ChatUser, ref: PlatformRef, positive: bool) -> None:
        self.feedback.append((chat_user, ref, positive))

    async def approval_view(self, approval_id: str) -> ApprovalView | None:
        return self.approvals.get(approval_id)

    async def pending_for(self, chat_user: ChatUser) -> list[ApprovalView]:
        return [
            v
            for v in self.approvals.values()
            if v.requester_chat_user == chat_user and v.status == "pending"
        ]

    async def awaiting_approver(self, chat_user: ChatUser) -> list[ApprovalView]:
        person = self._person(chat_user)
        if person is None or "ticket-leads" not in person.groups:
            return []
        return [v for v in self.approvals.values() if v.status == "pending"]

    async def my_requests(self, chat_user: ChatUser, limit: int = 10) -> list[ApprovalView]:
        mine = [v for v in self.approvals.values() if v.requester_chat_user == chat_user]
        return list(reversed(mine))[:limit]

    async def connections(self, chat_user: ChatUser) -> list[ServerConnection]:
        if self._person(chat_user) is None:
            return []
        return [
            ServerConnection(name, name not in self.unreachable, self.unreachable.get(name))
            for name in self.servers
        ]

    def on_approval_change(self, listener: Callable[[str], Awaitable[None]]) -> Callable[[], None]:
        # Its decisions are instant (no executing state): the adapter's own republish after
        # each decision is what the Slack tests on this fake see.
        return lambda: None

    async def home_audience(self, approval_id: str) -> list[ChatUser]:
        view = self.approvals.get(approval_id)
        if view is None:
            return []
        approvers = [
            ChatUser(self.platforms.get((team, user), "slack"), team, user)
            for (team, user), person in self.people.items()
            if "ticket-leads" in person.groups
        ]
        requester = [view.requester_chat_user] if view.requester_chat_user else []
        return [*requester, *(a for a in approvers if a not in requester)]

    def connect_url(self, chat_user: ChatUser, server: str) -> str:
        """The link that connects ``chat_user`` to ``server`` (bound to them, like a login)."""
        return f"http://{server}.test/authorize?state=connect-{chat_user.user_id}"

    async def link_url(self, chat_user: ChatUser) -> str:
        return f"http://idp.test/link/start?user={chat_user.user_id}"

    async def unlink(self, chat_user: ChatUser) -> bool:
        return self.people.pop((chat_user.team_id, chat_user.user_id), None) is not None

    async def status(self, chat_user: ChatUser, *, fresh: bool = False) -> UserStatus:
        person = self._person(chat_user)
        if person is None:
            return UserStatus(linked=False)
        return UserStatus(True, person.subject, person.email, person.groups)

    async def complete_link(self, state: str, code: str, *, iss: str | None = None) -> Linked:
        raise InvalidStateError("the fake core issues no login states")

    async def complete_server_connect(
        self, state: str, code: str, *, iss: str | None = None
    ) -> ServerConnected | ConnectRefused:
        return ConnectRefused("the fake core issues no connect links", stale=True)

    async def link_sso(self, chat_user: ChatUser, token: str) -> Linked | Refused:
        return Refused("the fake core has no single sign-on")

    async def sweep_forever(
        self, interval: float, notify: DecisionNotifier, *, platform: str | None = None
    ) -> None:
        """Nothing expires on its own here (tests decide); idles until cancelled."""
        await asyncio.Event().wait()

    def notify_platform(self, platform: str, notice: ApprovalNotice) -> None:
        self.notices.setdefault(platform, []).append(notice)

    async def deliver_notices(self, platform: str, handle: NoticeHandler) -> int:
        waiting = self.notices.pop(platform, [])
        for notice in waiting:
            await handle(notice)
        return len(waiting)

    async def notices_forever(self, platform: str, interval: float, handle: NoticeHandler) -> None:
        while True:
            await self.deliver_notices(platform, handle)
            await asyncio.sleep(interval)

    async def memory_command(self, chat_user: ChatUser, text: str) -> str:
        if self._person(chat_user) is None:
            return "Connect your account first."
        verb, _, rest = text.strip().partition(" ")
        if verb == "set":
            self.memory[chat_user] = rest.strip()
        elif verb == "delete":
            self.memory.pop(chat_user, None)
        return f"opsbot remembers: {self.memory.get(chat_user, 'nothing')}"

    async def remembered(self, chat_user: ChatUser) -> Remembered | None:
        if self._person(chat_user) is None:
            return None
        text = self.memory.get(chat_user)
        return Remembered(text or "opsbot remembers nothing about you.", text is None)

    async def forget_memory(self, chat_user: ChatUser) -> bool:
        return self.memory.pop(chat_user, None) is not None


def _validate(args: dict[str, Any]) -> dict[str, str]:
    errors: dict[str, str] = {}
    if args.get("status") not in UPDATE_TICKET_SCHEMA["properties"]["status"]["enum"]:
        errors["status"] = "not an allowed status"
    priority = args.get("priority")
    if priority is not None and not (isinstance(priority, int) and 1 <= priority <= 5):
        errors["priority"] = "must be between 1 and 5"
    return errors


def _checked(fake: FakeAssistant) -> AssistantPort:
    return fake  # mypy fails here if the fake stops implementing the port
