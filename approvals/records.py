"""Approval records: the proposed write calls, their decision and what really happened."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from broker.types import ChatUser

if TYPE_CHECKING:
    from agent_core.answer import ActionRequest as Proposal
    from agent_core.answer import Interrupt
    from agent_core.policy import ToolClass


class ApprovalStatus(StrEnum):
    """The approval's state (``Approval.state``)::

        pending → deciding → rejected | expired | withdrawn
                           → approved → executing → succeeded | failed | unknown
        unknown → succeeded | failed   (the reconciler, from the server's change log)

    ``deciding`` is the internal claim (one decision wins); ``approved`` means decided and
    not yet running; ``unknown`` means the write may or may not have happened;
    ``withdrawn``: the requester stopped the run before anyone decided (nothing ran).
    """

    PENDING = "pending"
    DECIDING = "deciding"
    APPROVED = "approved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    REJECTED = "rejected"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"

    @property
    def is_final(self) -> bool:
        """Decided and done running (``unknown`` only waits for the reconciler)."""
        return self not in OPEN_STATUSES

    @property
    def is_in_flight(self) -> bool:
        """Decided (or being decided) but not finished: a crash here is finished later."""
        return self in (ApprovalStatus.DECIDING, ApprovalStatus.APPROVED, ApprovalStatus.EXECUTING)


OPEN_STATUSES = frozenset(
    {
        ApprovalStatus.PENDING,
        ApprovalStatus.DECIDING,
        ApprovalStatus.APPROVED,
        ApprovalStatus.EXECUTING,
    }
)
FINAL_STATUSES = frozenset(s for s in ApprovalStatus if s.is_final)

DecisionType = Literal["approve", "edit", "reject"]

# Who "decides" an approval the sweeper rejects for age.
EXPIRY_DECIDER = "system:expiry"


@dataclass(frozen=True, slots=True)
class ActionRequest:
    """One proposed tool call: the prefixed tool name, its server and its exact arguments."""

    tool: str
    server: str
    args: dict[str, Any]
    description: str = ""
    tool_call_id: str = ""
    approver_group: str = ""
    sensitive: bool = False
    # The tool's input schema when proposed: lets any instance show and check an edit,
    # even one whose tool discovery is still cold. The agent re-validates on resume.
    input_schema: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReadRef:
    """One read in the chain that led to the proposal: the tool and the id it returned."""

    tool: str
    ref_id: str


def proposed_action(
    request: Proposal, rule: ToolClass, input_schema: dict[str, Any] | None
) -> ActionRequest:
    """The record of one write the model proposed, with what the tool policy says of it."""
    return ActionRequest(
        tool=request.name,
        server=request.server or request.name.split("_", 1)[0],
        args=dict(request.args),
        description=request.description,
        tool_call_id=request.tool_call_id,
        approver_group=rule.approver_group or "",
        sensitive=rule.sensitive,
        input_schema=input_schema or {},
    )


def read_chain(interrupt: Interrupt) -> tuple[ReadRef, ...]:
    """The reads that led to a proposal: one ``ReadRef`` per id each read returned."""
    return tuple(ReadRef(step.tool, ref) for step in interrupt.reads for ref in step.ids)


@dataclass(frozen=True, slots=True)
class ActionDecision:
    """The decision on one action request, in LangChain HITL's vocabulary."""

    type: DecisionType
    args: dict[str, Any] | None = None  # edited arguments, for "edit"
    message: str = ""  # reason, for "reject"

    def to_hitl(self, action: ActionRequest, idempotency_key: str | None) -> dict[str, Any]:
        """The HITL resume payload for this decision (approvals carry the idempotency key)."""
        if self.type == "reject":
            return {"type": "reject", "message": self.message or "rejected by the approver"}
        args = dict(self.args if self.type == "edit" and self.args is not None else action.args)
        if idempotency_key is None:
            return (
                {"type": "approve"}
                if self.type == "approve"
                else {"type": "edit", "edited_action": {"name": action.tool, "args": args}}
            )
        args["idempotency_key"] = idempotency_key
        return {"type": "edit", "edited_action": {"name": action.tool, "args": args}}


@dataclass(frozen=True, slots=True)
class Approval:
    """A pending (or decided) approval. Never holds a credential."""

    approval_id: str
    thread_id: str
    requester_subject: str
    actions: tuple[ActionRequest, ...]
    created_at: datetime
    expires_at: datetime
    requester_chat_user: ChatUser | None = None
    reads: tuple[ReadRef, ...] = ()
    status: ApprovalStatus = ApprovalStatus.PENDING
    decided_by: str | None = None
    decided_at: datetime | None = None
    decisions: tuple[ActionDecision, ...] = ()
    outcome: dict[str, Any] = field(default_factory=dict)
    # A short text for people on why it failed or is unknown; never the model's text.
    outcome_reason: str | None = None
    # The write calls of one model step each get an approval; they share ``batch_id`` (the
    # first one's id) and resume the run together once every one is decided.
    batch_id: str = ""
    batch_index: int = 0
    batch_size: int = 1
    # On the batch's first approval: when the paused run's resume was claimed, and when it
    # finished (each approved call runs on its own decision; the run resumes once, after all).
    resume_claimed_at: datetime | None = None
    resumed_at: datetime | None = None

    @property
    def batch(self) -> str:
        """The batch key; also the scope of the writes' idempotency keys."""
        return self.batch_id or self.approval_id

    @property
    def state(self) -> ApprovalStatus:
        """The name renderers use (``status`` is the stored column)."""
        return self.status

    @property
    def sensitive(self) -> bool:
        return any(a.sensitive for a in self.actions)

    def is_expired(self, now: datetime) -> bool:
        return now >= self.expires_at
