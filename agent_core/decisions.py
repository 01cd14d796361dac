"""Checking human decisions before a resume (LangChain HITL's shape).

One decision per pending action, in order: ``{"type": "approve"}``,
``{"type": "edit", "edited_action": {"name": <same tool>, "args": {...}}}`` or
``{"type": "reject", "message": "..."}``. An edit may not change the tool, must name an
allowlisted tool and must satisfy the tool's input schema; ``idempotency_key`` is opsbot's
and is dropped from edited arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import jsonschema

from agent_core.answer import Interrupt
from agent_core.errors import InvalidDecisionError
from agent_core.tools import IDEMPOTENCY_ARG


class EditValidator(Protocol):
    def tool_schema(self, name: str) -> dict[str, Any] | None: ...

    def is_allowed(self, name: str) -> bool: ...


# opsbot sets the idempotency key itself; nobody edits it.
RESERVED_ARGS = frozenset({IDEMPOTENCY_ARG})


def check_edited_args(
    tool: str,
    edited_args: Mapping[str, Any],
    *,
    input_schema: Mapping[str, Any] | None,
    allowed: bool,
    edited_tool: str | None = None,
) -> dict[str, Any]:
    """The one rule for edited arguments (approvals and the agent's resume both use it).

    The tool cannot change; it must still be allowlisted; the arguments must satisfy the
    tool's input schema, name no property the schema does not define and not set opsbot's
    own ``idempotency_key``. Returns the arguments; raises ``InvalidDecisionError`` whose
    ``field_errors`` name each bad argument (``"tool"`` for the tool itself).
    """
    errors: dict[str, str] = {}
    if edited_tool is not None and edited_tool != tool:
        errors["tool"] = f"the tool cannot be changed (was {tool})"
    if not allowed:
        errors["tool"] = f"{tool} is not on the allowlist"
    if input_schema is None:
        errors["tool"] = f"no input schema is known for {tool}"
    if errors:
        raise InvalidDecisionError(f"the edit of {tool} is refused", errors)
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
        validator = jsonschema.Draft202012Validator(schema)
        for error in validator.iter_errors(args):
            field = _field_of(error.validator, error.validator_value, error.path, args)
            errors.setdefault(field, error.message)
    except jsonschema.SchemaError as exc:
        errors["tool"] = f"the tool's input schema is invalid: {exc.message}"
    if errors:
        raise InvalidDecisionError(f"edited arguments for {tool} are invalid", errors)
    return args


def _field_of(validator: Any, value: Any, path: Any, args: Mapping[str, Any]) -> str:
    if list(path):
        return ".".join(str(p) for p in path)
    if validator == "required" and isinstance(value, list):
        missing = [r for r in value if r not in args]
        if missing:
            return str(missing[0])
    return "(arguments)"


def validate_edit(
    original_name: str, edited: Mapping[str, Any], tools: EditValidator
) -> dict[str, Any]:
    """The edited action in HITL's shape (``{"name", "args"}``), checked by
    ``check_edited_args``; the idempotency key opsbot itself put in the resume payload is
    dropped first. Errors about the tool are reported under ``"name"``, HITL's field."""
    name = edited.get("name", original_name)
    args = edited.get("args")
    if not isinstance(args, Mapping):
        raise InvalidDecisionError("edited args must be an object", {"args": "must be an object"})
    clean = {k: v for k, v in args.items() if k not in RESERVED_ARGS}
    try:
        checked = check_edited_args(
            original_name,
            clean,
            input_schema=tools.tool_schema(original_name),
            allowed=tools.is_allowed(original_name),
            edited_tool=str(name),
        )
    except InvalidDecisionError as exc:
        errors = {("name" if k == "tool" else k): v for k, v in exc.field_errors.items()}
        raise InvalidDecisionError(str(exc), errors) from None
    return {"name": name, "args": checked}


def validate_decisions(
    pending: Interrupt, decisions: Sequence[Mapping[str, Any]], tools: EditValidator
) -> list[dict[str, Any]]:
    """Decisions ready for ``Command(resume={"decisions": ...})``."""
    actions = pending.action_requests
    if len(decisions) != len(actions):
        raise InvalidDecisionError(
            f"expected {len(actions)} decision(s), got {len(decisions)}",
            {"decisions": f"one decision per pending action ({len(actions)})"},
        )
    out: list[dict[str, Any]] = []
    for action, config, decision in zip(actions, pending.review_configs, decisions, strict=True):
        kind = decision.get("type")
        if kind not in config.allowed_decisions:
            raise InvalidDecisionError(
                f"decision {kind!r} is not allowed for {action.name}",
                {"type": f"one of {', '.join(config.allowed_decisions)}"},
            )
        if kind == "approve":
            out.append({"type": "approve"})
        elif kind == "reject":
            message = decision.get("message")
            out.append(
                {"type": "reject", "message": str(message)} if message else {"type": "reject"}
            )
        else:
            edited = decision.get("edited_action")
            if not isinstance(edited, Mapping):
                raise InvalidDecisionError(
                    "an edit needs edited_action", {"edited_action": "required"}
                )
            out.append({"type": "edit", "edited_action": validate_edit(action.name, edited, tools)})
    return out
