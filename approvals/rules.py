"""Who may decide an approval, and what an edit may change. Pure functions: no I/O, no clock.

Every rule fails closed: an action without an approver group cannot be approved by anyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agent_core.decisions import EditValidator, check_edited_args
from agent_core.errors import InvalidDecisionError
from approvals.errors import (
    AlreadyDecidedError,
    ApprovalExpiredError,
    InvalidEditError,
    NotAuthorisedError,
)
from approvals.records import ActionRequest, Approval, ApprovalStatus
from broker.types import Identity


def check_decider(approval: Approval, approver: Identity, now: datetime) -> None:
    """Raise unless ``approver`` may decide ``approval`` at ``now``."""
    if approval.status is ApprovalStatus.EXPIRED:
        raise ApprovalExpiredError("this approval expired without a decision")
    if approval.status is not ApprovalStatus.PENDING:
        raise AlreadyDecidedError(approval.decided_by, approval.status.value)
    if approval.is_expired(now):
        raise ApprovalExpiredError("this approval has expired")
    for action in approval.actions:
        if not action.approver_group:
            raise NotAuthorisedError(f"{action.tool} has no approver group: nobody may approve it")
        if action.approver_group not in approver.groups:
            raise NotAuthorisedError(
                f"approving {action.tool} needs membership of {action.approver_group!r}"
            )
    if approval.sensitive and approver.subject == approval.requester_subject:
        raise NotAuthorisedError("you cannot approve your own request for a sensitive tool")


def validate_edit(
    action: ActionRequest,
    edited_args: Mapping[str, Any],
    tools: EditValidator,
    edited_tool: str | None = None,
) -> dict[str, Any]:
    """The edited arguments if they are valid for ``action``'s tool; ``InvalidEditError`` if
    not. The rule itself is ``agent_core.decisions.check_edited_args`` (one place); the schema
    is the tool's current one, else the one recorded with the proposal."""
    schema = tools.tool_schema(action.tool) or action.input_schema or None
    allowed = tools.is_allowed(action.tool)
    try:
        return check_edited_args(
            action.tool, edited_args, input_schema=schema, allowed=allowed, edited_tool=edited_tool
        )
    except InvalidDecisionError as exc:
        raise InvalidEditError(exc.field_errors) from None
