"""Everything a chat adapter sees: the DTOs it renders, the outcomes it matches on, and
``AssistantPort``, the calls it may make. Platform-neutral; nothing here imports a chat SDK.

Example::

    reply = await assistant.handle_message(ChatUser("slack", "T1", "U1"), ref, "close PAY-7")
    match reply:
        case ApprovalRequested(approval=summary): ...   # post a card for summary.approval_id
    outcome = await assistant.decide(ChatUser("slack", "T1", "U2"), summary.approval_id, Approve())
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agent_core.threads import PlatformRef
from broker.types import ChatUser

__all__ = [
    "AlreadyDecided",
    "Answer",
    "AnswerDelta",
    "Answered",
    "ApprovalNotice",
    "ApprovalRequested",
    "ApprovalSummary",
    "ApprovalView",
    "Approve",
    "AssistantPort",
    "ChatUser",
    "ConnectRefused",
    "Decided",
    "Decision",
    "DecisionNotifier",
    "DecisionOutcome",
    "Edit",
    "Expired",
    "InvalidEdit",
    "LinkRequired",
    "Linked",
    "NotAuthorised",
    "NoticeHandler",
    "PlatformRef",
    "Refused",
    "Reject",
    "Remembered",
    "Reply",
    "RunEvent",
    "RunEvents",
    "ServerConnectRequired",
    "ServerConnected",
    "ServerConnection",
    "Source",
    "StopResult",
    "Stopped",
    "ToolCallAwaitingApproval",
    "ToolCallFinished",
    "ToolCallStarted",
    "UserStatus",
    "unshown",
]


@dataclass(frozen=True, slots=True)
class Linked:
    """An account link just completed: whose chat account, and the company identity shown."""

    chat_user: ChatUser
    who: str


@dataclass(frozen=True, slots=True)
class Source:
    system: str
    id: str
    link: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """A structured answer, ready to render."""

    answer: str
    sources: list[Source] = field(default_factory=list)
    actions_taken: list[str] = field(default_factory=list)
    pending_approvals: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    confidence: str | None = None
    model_used: str | None = None


@dataclass(frozen=True, slots=True)
class ApprovalSummary:
    """A pending approval as the requester's reply names it."""

    approval_id: str
    tool: str
    server: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class LinkRequired:
    """The chat user has not connected their company account: show ``login_url``."""

    login_url: str


@dataclass(frozen=True, slots=True)
class Refused:
    """A clear refusal (not the thread's owner, bad input, a required server down...)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Answered:
    answer: Answer


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """Writes are waiting for approvers: post one card per entry of ``approvals`` (one per
    write call; ``approval`` is the first). The run resumes once every one is decided."""

    answer_so_far: Answer | None
    approval: ApprovalSummary
    approvals: tuple[ApprovalSummary, ...] = ()

    @property
    def all(self) -> tuple[ApprovalSummary, ...]:
        return self.approvals or (self.approval,)


@dataclass(frozen=True, slots=True)
class ServerConnectRequired:
    """The request needs an MCP server that signs each user in itself (``auth: oauth``) and
    this user has not connected it: show a *Connect <server>* button opening ``connect_url``
    (single use, short-lived, bound to this user). ``answer`` is what could be answered
    without that server, if anything."""

    server: str
    connect_url: str
    answer: Answer | None = None


@dataclass(frozen=True, slots=True)
class Stopped:
    """The requester pressed Stop: ``text`` says what had run and what never started.

    ``done`` and ``not_started`` are call titles (``"ticketing · get ticket PAY-102"``)."""

    text: str
    done: tuple[str, ...] = ()
    not_started: tuple[str, ...] = ()


Reply = LinkRequired | Refused | Answered | ApprovalRequested | ServerConnectRequired | Stopped


@dataclass(frozen=True, slots=True)
class ServerConnected:
    """A user just connected an MCP server (``/oauth/mcp/callback``): tell them where they
    asked (replace the Connect prompt) and let them ask again."""

    chat_user: ChatUser
    server: str


@dataclass(frozen=True, slots=True)
class ConnectRefused:
    """A connection was not completed. ``stale``: the link expired, was used already or is
    not this user's (answer 400 and ask them to start again); otherwise the server's
    authorization server refused or could not be reached (502). ``reason`` is for people."""

    reason: str
    stale: bool


# --- live progress of a run (``handle_message(..., events=...)``) ---------------------------


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """An MCP call left opsbot. ``title`` is for people: ``"ticketing · get ticket PAY-102"``."""

    call_id: str
    server: str
    tool: str
    title: str


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """The call ``call_id`` came back; ``error`` says why it failed, in people's words."""

    call_id: str
    ok: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallAwaitingApproval:
    """A write that did not run: it waits for an approver (``approval_id``)."""

    call_id: str
    server: str
    tool: str
    title: str
    approval_id: str


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """More of the answer's text while the model writes it: ``text`` is new, ``so_far`` all
    of it until now (``text`` included). Only whole sentences, already fit for people (no
    text meant for the model; a URL no tool result carried is never a link); the sources
    come with the finished ``Answer``. Show the rest with ``unshown(answer.answer, so_far)``.
    A model that does not stream sends none: the answer then comes in one piece."""

    text: str
    so_far: str


def unshown(answer: str, shown: str) -> str:
    """What of ``answer`` was not shown yet, after ``shown`` (the last ``AnswerDelta``'s
    ``so_far``). In the rare case the finished answer does not continue what was shown (it
    was replaced: a model failure, a Stop), all of it, after a blank line."""
    if answer.startswith(shown):
        return answer[len(shown) :]
    return f"\n\n{answer}" if shown else answer


RunEvent = ToolCallStarted | ToolCallFinished | ToolCallAwaitingApproval | AnswerDelta
# Told each event in order, during ``handle_message``; a failing one never fails the run.
# An adapter that listens also gets the answer's text as it is written (``AnswerDelta``).
RunEvents = Callable[[RunEvent], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ApprovalView:
    """What an approver sees: the pending call and its context, never the thread history.

    ``reads`` is the chain of reads that led to the proposal (``"<tool> <id>"``);
    ``input_schema`` is the tool's JSON schema, for the Edit modal.
    """

    approval_id: str
    tool: str
    server: str
    args: dict[str, Any]
    requester: str
    requester_chat_user: ChatUser | None
    requester_ref: PlatformRef | None
    reads: list[str]
    expires_at: datetime
    input_schema: dict[str, Any]
    status: str = "pending"
    description: str = ""
    decided_by: str | None = None
    approver_group: str | None = None
    # After an Edit: ``args`` are the edited ones (what runs), ``original_args`` what the
    # model proposed, ``edited_by`` who changed them.
    original_args: dict[str, Any] | None = None
    edited_by: str | None = None
    # pending | approved | executing | succeeded | failed | unknown | rejected | expired
    state: str = "pending"
    # Why it failed or is unknown, in people's words (never text meant for the model).
    outcome_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Approve:
    pass


@dataclass(frozen=True, slots=True)
class Edit:
    """Approve with changed arguments. The tool itself cannot change."""

    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reject:
    reason: str | None = None


Decision = Approve | Edit | Reject


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision that was taken: who, what, and the requester's result.

    ``decision`` is ``"approved" | "edited" | "rejected" | "expired"``; ``state`` is what
    really happened (``succeeded``/``failed``/``unknown``/``rejected``/``expired``) and
    ``outcome_reason`` says why for people; ``outcome`` is ``state`` plus that reason.
    Post ``requester_result`` in the requester's thread at ``requester_ref``.
    """

    approval_id: str
    decision: str
    decided_by: str
    outcome: str
    requester_ref: PlatformRef | None
    requester_result: Reply | None
    state: str = ""
    outcome_reason: str | None = None
    # Other approvals of the same model step that this decision finished (update their
    # cards and tell their requester too).
    siblings: tuple[Decided, ...] = ()


DecisionNotifier = Callable[[Decided], Awaitable[None]]
"""An adapter's ``announce``: shows one ``Decided`` (card updated, requester told)."""


@dataclass(frozen=True, slots=True)
class ApprovalNotice:
    """What this platform must show of an approval handled on another platform (an approval
    may have a card on Slack and on Teams; the first decision wins everywhere).

    ``kind`` ``"post"``: requested elsewhere: post this platform's card (render the approval's
    current state: it may be decided already). ``"decided"``: decided elsewhere (or by the
    sweeper): update this platform's card with ``decided``, and tell the requester if their
    thread (``decided.requester_ref``) is on this platform.
    """

    notice_id: str
    kind: str
    approval_id: str
    decided: Decided | None = None


NoticeHandler = Callable[[ApprovalNotice], Awaitable[None]]
"""Shows one ``ApprovalNotice`` on this platform; raising leaves it to be delivered again."""


@dataclass(frozen=True, slots=True)
class AlreadyDecided:
    """Another decision won; ``by`` is who made it."""

    by: str


@dataclass(frozen=True, slots=True)
class NotAuthorised:
    reason: str


@dataclass(frozen=True, slots=True)
class Expired:
    pass


@dataclass(frozen=True, slots=True)
class InvalidEdit:
    """Edited arguments failed validation; ``field_errors`` maps an argument to a message."""

    field_errors: dict[str, str]


DecisionOutcome = Decided | AlreadyDecided | NotAuthorised | Expired | InvalidEdit | LinkRequired


@dataclass(frozen=True, slots=True)
class StopResult:
    """What Stop did: ``run_stopped`` when a run was working (it says so in its own reply);
    ``withdrawn``: approvals that will never run (update their cards, tell the thread);
    ``refused``: why nothing was stopped (not the thread's owner, not linked)."""

    run_stopped: bool = False
    withdrawn: tuple[Decided, ...] = ()
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class UserStatus:
    linked: bool
    subject: str | None = None
    email: str | None = None
    groups: frozenset[str] = frozenset()
    login_url: str | None = None
    # Why a linked account cannot be used now (access revoked, IdP unreachable), for the user.
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Remembered:
    """What opsbot remembers about a linked user (set with ``/ops memory``), ready to show.

    ``empty`` is true when nothing is remembered (then there is nothing to forget)."""

    text: str
    empty: bool


@dataclass(frozen=True, slots=True)
class ServerConnection:
    """One MCP server a linked user's questions reach, and whether opsbot can reach it as
    them now (App Home). ``problem`` says why not, in people's words."""

    server: str
    connected: bool
    problem: str | None = None


class AssistantPort(Protocol):
    """What a chat adapter may call. ``Assistant`` implements it; tests may fake it."""

    async def handle_message(
        self, chat_user: ChatUser, ref: PlatformRef, text: str, *, events: RunEvents | None = None
    ) -> Reply:
        """Answer ``text``; ``events`` is told of each tool call as it happens."""
        ...

    async def stop(self, chat_user: ChatUser, ref: PlatformRef) -> StopResult:
        """Stop the run working at ``ref`` (on any instance) and withdraw its pending
        approvals. Only the thread's owner may."""
        ...

    async def record_feedback(self, chat_user: ChatUser, ref: PlatformRef, positive: bool) -> None:
        """A thumbs up (``positive``) or down on an answer at ``ref``: audited and counted."""
        ...

    async def decide(
        self, approver: ChatUser, approval_id: str, decision: Decision
    ) -> DecisionOutcome: ...

    async def approval_view(self, approval_id: str) -> ApprovalView | None: ...

    async def pending_for(self, chat_user: ChatUser) -> list[ApprovalView]: ...

    async def awaiting_approver(self, chat_user: ChatUser) -> list[ApprovalView]: ...

    async def my_requests(self, chat_user: ChatUser, limit: int = 10) -> list[ApprovalView]:
        """The user's latest requests in any state, newest first (App Home)."""
        ...

    async def connections(self, chat_user: ChatUser) -> list[ServerConnection]:
        """Each server reached with the user's own token and whether it can be reached now;
        empty when the user is not linked."""
        ...

    async def home_audience(self, approval_id: str) -> list[ChatUser]:
        """Whose App Home lists ``approval_id``: its requester and its eligible approvers."""
        ...

    def on_approval_change(self, listener: Callable[[str], Awaitable[None]]) -> Callable[[], None]:
        """Call ``listener(approval_id)`` whenever an approval changes state here (created,
        decided, executing, finished), in a task of its own; returns the undo."""
        ...

    async def link_url(self, chat_user: ChatUser) -> str: ...

    async def unlink(self, chat_user: ChatUser) -> bool: ...

    async def status(self, chat_user: ChatUser, *, fresh: bool = False) -> UserStatus:
        """``fresh``: ask the IdP now (a person asked), not a sign-in up to a minute old."""
        ...

    async def complete_link(self, state: str, code: str, *, iss: str | None = None) -> Linked:
        """Finish an account link from the IdP's redirect (``/oauth/callback``): who was
        linked. Raises (``InvalidStateError``, ``LinkingError``) when the login is refused."""
        ...

    async def complete_server_connect(
        self, state: str, code: str, *, iss: str | None = None
    ) -> ServerConnected | ConnectRefused:
        """Finish connecting an ``auth: oauth`` MCP server from its authorization server's
        redirect (``/oauth/mcp/callback``): who connected which server, or why not."""
        ...

    async def link_sso(self, chat_user: ChatUser, token: str) -> Linked | Refused:
        """Teams SSO: link ``chat_user`` through the token their client obtained silently
        (the company's IdP is Entra). ``Refused``: not linked (show the sign-in card)."""
        ...

    async def sweep_forever(
        self, interval: float, notify: DecisionNotifier, *, platform: str | None = None
    ) -> None:
        """Every ``interval`` seconds, expire overdue approvals and pass each result to
        ``notify`` (the adapter's ``announce``); runs until cancelled. ``platform``: whose
        adapter ``notify`` is (the other platforms get an ``ApprovalNotice``)."""
        ...

    # --- cross-platform approvals: decisions taken on another platform -------------------

    async def deliver_notices(self, platform: str, handle: NoticeHandler) -> int:
        """Hand each of ``platform``'s pending ``ApprovalNotice``s to ``handle`` once (across
        instances); returns how many were delivered. A raising ``handle`` is retried later."""
        ...

    async def notices_forever(self, platform: str, interval: float, handle: NoticeHandler) -> None:
        """``deliver_notices`` until cancelled: at once for notices this process published,
        every ``interval`` seconds for other instances'."""
        ...

    # --- user memory: when it is disabled, ``remembered`` is None and commands say so ----

    async def memory_command(self, chat_user: ChatUser, text: str) -> str:
        """Run one ``memory`` sub-command (``show``, ``set team payments``, ``delete``)."""
        ...

    async def remembered(self, chat_user: ChatUser) -> Remembered | None:
        """The user's own preferences; ``None`` when memory is off or the user is not linked."""
        ...

    async def forget_memory(self, chat_user: ChatUser) -> bool:
        """Forget everything remembered about the user; ``True`` if there was something."""
        ...
