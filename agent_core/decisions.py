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


def validate_edit(
    original_name: str, edited: Mapping[str, Any], tools: EditValidator
) -> dict[str, Any]:
    """The edited action, normalised; raises ``InvalidDecisionError`` with field errors."""
    name = edited.get("name", original_name)
    if name != original_name:
        raise InvalidDecisionError(
            f"an edit may not change the tool ({original_name} → {name})",
            {"name": "the tool cannot be changed; reject and ask for a new request instead"},
        )
    if not tools.is_allowed(name):
        raise InvalidDecisionError(f"{name} is not on the allowlist", {"name": "not allowed"})
    args = edited.get("args")
    if not isinstance(args, Mapping):
        raise InvalidDecisionError("edited args must be an object", {"args": "must be an object"})
    clean = {k: v for k, v in args.items() if k != IDEMPOTENCY_ARG}
    schema = tools.tool_schema(name)
    if schema is None:
        raise InvalidDecisionError(
            f"cannot check the arguments of {name}: its server is not available",
            {"name": "tool schema unavailable"},
        )
    errors: dict[str, str] = {}
    validator = jsonschema.Draft202012Validator(schema)
    for err in validator.iter_errors(clean):
        field = str(err.path[0]) if err.path else _missing_field(err) or "args"
        errors.setdefault(field, err.message)
    if errors:
        raise InvalidDecisionError(f"edited arguments for {name} are invalid", errors)
    return {"name": name, "args": clean}


def _missing_field(err: Any) -> str | None:
    if err.validator == "required" and isinstance(err.message, str):
        return err.message.split("'")[1] if "'" in err.message else None
    if err.validator == "additionalProperties":
        return "args"
    return None


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
