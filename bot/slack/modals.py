"""Modals: Edit (one input per argument, from the tool's input JSON schema) and Reject.

``edit_modal`` builds the form; ``parse_edit`` turns a submission back into typed arguments
or field errors keyed by block id (what ``ack(response_action="errors")`` expects). The core
validates again: this is only the first, friendlier check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.slack.core import ApprovalView
from bot.slack.render import Block, escape, section
from infra.json_input import parse_json

EDIT_CALLBACK_ID = "approval_edit_submit"
REJECT_CALLBACK_ID = "approval_reject_submit"
VALUE_ACTION_ID = "value"
REASON_BLOCK_ID = "reason"
ARG_PREFIX = "arg:"
MODAL_BLOCK_LIMIT = 100
JSON_NULL = "null"


@dataclass(frozen=True, slots=True)
class ModalContext:
    """What a modal must remember: the approval and, when opened from a card, that card."""

    approval_id: str
    channel_id: str | None = None
    message_ts: str | None = None

    def dump(self) -> str:
        return json.dumps(
            {"a": self.approval_id, "c": self.channel_id, "t": self.message_ts},
            separators=(",", ":"),
        )

    @classmethod
    def load(cls, raw: str) -> ModalContext:
        data = parse_json(raw or "{}")
        if not isinstance(data, dict) or not isinstance(data.get("a"), str):
            raise ValueError("modal metadata has no approval id")
        return cls(data["a"], data.get("c"), data.get("t"))


def block_id_for(name: str) -> str:
    return f"{ARG_PREFIX}{name}"[:255]


def _plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": text[:limit] or " "}


def _option(value: Any) -> dict[str, Any]:
    label = value if isinstance(value, str) else json.dumps(value)
    return {"text": _plain(str(label), 75), "value": json.dumps(value)[:150]}


def _resolve(spec: Any, root: dict[str, Any]) -> dict[str, Any]:
    """One property's schema, flattened: local ``$ref`` followed, ``anyOf``/``oneOf`` with
    ``null`` (pydantic's ``X | None``) reduced to the non-null branch."""
    if not isinstance(spec, dict):
        return {}
    ref = spec.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        merged = {**_resolve(target, root), **{k: v for k, v in spec.items() if k != "$ref"}}
        return merged
    for key in ("anyOf", "oneOf"):
        branches = spec.get(key)
        if isinstance(branches, list):
            real = [b for b in branches if not (isinstance(b, dict) and b.get("type") == JSON_NULL)]
            if len(real) == 1:
                rest = {k: v for k, v in spec.items() if k != key}
                return {**_resolve(real[0], root), **rest}
    return spec


def _properties(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return {}
    return {str(name): _resolve(spec, schema) for name, spec in props.items()}


def _kind(spec: dict[str, Any]) -> str:
    kind = spec.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != JSON_NULL), "string")
    if kind is None and "anyOf" in spec:
        kinds = [s.get("type") for s in spec["anyOf"] if isinstance(s, dict)]
        kind = next((k for k in kinds if k and k != JSON_NULL), "string")
    return str(kind or "string")


def _element(spec: dict[str, Any], current: Any) -> dict[str, Any]:
    kind = _kind(spec)
    if "enum" in spec or kind == "boolean":
        choices = list(spec.get("enum", [True, False]))
        element: dict[str, Any] = {
            "type": "static_select",
            "action_id": VALUE_ACTION_ID,
            "options": [_option(c) for c in choices][:100],
        }
        if current in choices:
            element["initial_option"] = _option(current)
        return element
    if kind in ("integer", "number"):
        element = {
            "type": "number_input",
            "action_id": VALUE_ACTION_ID,
            "is_decimal_allowed": kind == "number",
        }
        if isinstance(current, int | float) and not isinstance(current, bool):
            element["initial_value"] = str(current)
        return element
    element = {"type": "plain_text_input", "action_id": VALUE_ACTION_ID}
    if kind in ("array", "object"):
        element["multiline"] = True
        if current is not None:
            element["initial_value"] = json.dumps(current, ensure_ascii=False)[:3000]
    else:
        element["multiline"] = int(spec.get("maxLength", 0)) > 150 or (
            isinstance(current, str) and ("\n" in current or len(current) > 150)
        )
        if current is not None:
            element["initial_value"] = str(current)[:3000]
        if "maxLength" in spec:
            element["max_length"] = min(int(spec["maxLength"]), 3000)
    return element


def edit_modal(view: ApprovalView, ctx: ModalContext) -> dict[str, Any]:
    properties = _properties(view.input_schema)
    required = set(view.input_schema.get("required", []))
    blocks: list[Block] = [
        section(
            f"Edit the call to `{escape(view.server)}` · `{escape(view.tool)}` "
            f"for {escape(view.requester)}. It still runs as the requester."
        )
    ]
    for name, spec in properties.items():
        if len(blocks) >= MODAL_BLOCK_LIMIT:
            break
        block: Block = {
            "type": "input",
            "block_id": block_id_for(name),
            "label": _plain(str(spec.get("title") or name), 2000),
            "element": _element(spec, view.args.get(name)),
            "optional": name not in required,
        }
        hint = spec.get("description")
        if _kind(spec) in ("array", "object"):
            hint = ((hint + " ") if hint else "") + "(JSON)"
        if hint:
            block["hint"] = _plain(str(hint), 2000)
        blocks.append(block)
    return {
        "type": "modal",
        "callback_id": EDIT_CALLBACK_ID,
        "private_metadata": ctx.dump(),
        "title": _plain("Edit and approve", 24),
        "submit": _plain("Approve", 24),
        "close": _plain("Cancel", 24),
        "blocks": blocks,
    }


def _raw_value(state: dict[str, Any]) -> str | None:
    """The submitted value of one input block, as text (select values are JSON)."""
    element = state.get(VALUE_ACTION_ID, {})
    if element.get("type") == "static_select" or "selected_option" in element:
        option = element.get("selected_option")
        return None if option is None else str(option.get("value"))
    value = element.get("value")
    return None if value is None or str(value).strip() == "" else str(value)


def _convert(spec: dict[str, Any], raw: str, is_select: bool) -> Any:
    kind = _kind(spec)
    if is_select:
        try:
            value = parse_json(raw)
        except ValueError:  # the parser's words are not the approver's business
            raise ValueError("Choose one of the listed values.") from None
        if "enum" in spec and value not in spec["enum"]:
            raise ValueError("Choose one of the listed values.")
        return value
    if kind == "integer":
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError("Enter a whole number.") from None
    if kind == "number":
        try:
            return float(raw.strip())
        except ValueError:
            raise ValueError("Enter a number.") from None
    if kind in ("array", "object"):
        try:
            value = parse_json(raw)
        except ValueError:
            raise ValueError(f"Enter a JSON {kind}.") from None
        if not isinstance(value, list if kind == "array" else dict):
            raise ValueError(f"Enter a JSON {kind}.")
        return value
    if "maxLength" in spec and len(raw) > int(spec["maxLength"]):
        raise ValueError(f"At most {spec['maxLength']} characters.")
    if "minLength" in spec and len(raw) < int(spec["minLength"]):
        raise ValueError(f"At least {spec['minLength']} characters.")
    return raw


def parse_edit(
    schema: dict[str, Any], values: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Submitted state → (arguments, errors by block id)."""
    properties = _properties(schema)
    required = set(schema.get("required", []))
    args: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, spec in properties.items():
        block_id = block_id_for(name)
        state = values.get(block_id, {})
        raw = _raw_value(state)
        if raw is None:
            if name in required:
                errors[block_id] = "Required."
            continue
        is_select = "selected_option" in state.get(VALUE_ACTION_ID, {})
        try:
            args[name] = _convert(spec, raw, is_select)
        except (ValueError, json.JSONDecodeError) as exc:
            errors[block_id] = str(exc) or "Invalid value."
    return args, errors


def field_errors_to_blocks(field_errors: dict[str, str], schema: dict[str, Any]) -> dict[str, str]:
    """The core's errors by argument name → errors by block id; errors on unknown fields
    (or the whole call) land on the first input so the approver still sees them."""
    names = list(schema.get("properties", {}))
    out: dict[str, str] = {}
    for field, message in field_errors.items():
        target = field if field in names else (names[0] if names else field)
        block = block_id_for(target)
        out[block] = f"{out[block]} {message}" if block in out else message
    return out


def reject_modal(view: ApprovalView, ctx: ModalContext) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": REJECT_CALLBACK_ID,
        "private_metadata": ctx.dump(),
        "title": _plain("Reject request", 24),
        "submit": _plain("Reject", 24),
        "close": _plain("Cancel", 24),
        "blocks": [
            section(
                f"Reject the call to `{escape(view.server)}` · `{escape(view.tool)}` "
                f"for {escape(view.requester)}? Nothing will be written."
            ),
            {
                "type": "input",
                "block_id": REASON_BLOCK_ID,
                "optional": True,
                "label": _plain("Reason (shown to the requester)", 2000),
                "element": {
                    "type": "plain_text_input",
                    "action_id": VALUE_ACTION_ID,
                    "multiline": True,
                    "max_length": 1000,
                },
            },
        ],
    }


def parse_reason(values: dict[str, dict[str, Any]]) -> str | None:
    return _raw_value(values.get(REASON_BLOCK_ID, {}))
