"""Who may decide an approval, and what an edit may change. Pure functions: no I/O, no clock.

Every rule fails closed: an action without an approver group cannot be approved by anyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from approvals.errors import (
    AlreadyDecidedError,
    ApprovalExpiredError,
    InvalidEditError,
    NotAuthorisedError,
)
from approvals.records import ActionRequest, Approval, ApprovalStatus
from broker.types import Identity

# opsbot sets the idempotency key itself; nobody edits it.
RESERVED_ARGS = frozenset({"idempotency_key"})


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
    *,
    input_schema: Mapping[str, Any] | None,
    allowed: bool,
    edited_tool: str | None = None,
) -> dict[str, Any]:
    """The edited arguments if they are valid for ``action``'s tool; ``InvalidEditError`` if not.

    The tool cannot change; it must still be allowlisted; the arguments must satisfy the
    tool's input schema and name no property the schema does not define.
    """
    errors: dict[str, str] = {}
    if edited_tool is not None and edited_tool != action.tool:
        errors["tool"] = f"the tool cannot be changed (was {action.tool})"
    if not allowed:
        errors["tool"] = f"{action.tool} is not on the allowlist"
    if input_schema is None:
        errors["tool"] = f"no input schema is known for {action.tool}"
    if errors:
        raise InvalidEditError(errors)
    assert input_schema is not None
    args = dict(edited_args)
    for reserved in RESERVED_ARGS & args.keys():
        errors[reserved] = "set by opsbot; it cannot be edited"
    properties = input_schema.get("properties") or {}
    for name in args.keys() - properties.keys() - RESERVED_ARGS:
        errors[name] = "not an argument of this tool"
    schema = {k: v for k, v in input_schema.items() if k != "$schema"}
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r not in RESERVED_ARGS]
    try:
        validator = Draft202012Validator(schema)
        for error in validator.iter_errors(args):
            field = _field_of(error.validator, error.validator_value, error.path, args)
            errors.setdefault(field, error.message)
    except SchemaError as exc:
        errors["tool"] = f"the tool's input schema is invalid: {exc.message}"
    if errors:
        raise InvalidEditError(errors)
    return args


def _field_of(validator: Any, value: Any, path: Any, args: Mapping[str, Any]) -> str:
    if list(path):
        return ".".join(str(p) for p in path)
    if validator == "required" and isinstance(value, list):
        missing = [r for r in value if r not in args]
        if missing:
            return str(missing[0])
    return "(arguments)"
