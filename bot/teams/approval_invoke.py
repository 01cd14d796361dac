"""A click on a Teams approval card: the ``adaptiveCard/action`` invoke, read and checked.

``read_card_action`` turns the invoke activity (its JSON) into a ``CardAction``: who clicked
(``ChatUser("teams", tenant, aadObjectId)``), which approval, which verb, and for a decision
the ``assistant.types`` ``Decision`` (Approve / Reject(reason) / Edit(args)), with each edited
value coerced to the type the tool's input schema gives it. Anything malformed or forged is a
``BadAction`` with a message for the clicker: the handler answers it with a 400 invoke
response, never a 500. ``coerce_edit`` is separate because it needs the approval's schema.

The invoke response bodies Teams expects are built here too (``card_response`` and friends).

Example::

    action = read_card_action(activity)
    if isinstance(action, BadAction):
        return error_response(400, action.message)
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.teams.approval_cards import (
    ARG_INPUT_PREFIX,
    CONTENT_TYPE,
    DECISION_VERBS,
    EDIT_VERB,
    REASON_LIMIT,
    REJECT_REASON_INPUT,
    REJECT_VERB,
    VIEW_VERBS,
    Card,
    edit_fields,
)
from bot.teams.approval_cards import (
    Field as InputField,
)
from bot.teams.core import Approve, ChatUser, Decision, Reject
from infra.json_input import parse_json

log = logging.getLogger(__name__)

INVOKE_NAME = "adaptiveCard/action"
MAX_ID_CHARS = 64
MAX_VALUE_CHARS = 20_000  # one edited argument; the card itself is capped far below this


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _From(_Model):
    id: str = ""
    name: str = ""
    aad_object_id: str = Field(default="", alias="aadObjectId", max_length=128)


class _Conversation(_Model):
    id: str = ""
    tenant_id: str | None = Field(default=None, alias="tenantId")


class _Tenant(_Model):
    id: str = ""


class _ChannelData(_Model):
    tenant: _Tenant | None = None


class _Action(_Model):
    type: str = ""
    verb: str = Field(min_length=1, max_length=64)
    data: dict[str, Any] = Field(default_factory=dict)


class _Value(_Model):
    action: _Action
    trigger: str = "manual"


class _Invoke(_Model):
    type: Literal["invoke"]
    name: Literal["adaptiveCard/action"]
    channel_id: str = Field(default="msteams", alias="channelId")
    from_: _From = Field(alias="from")
    conversation: _Conversation
    channel_data: _ChannelData | None = Field(default=None, alias="channelData")
    reply_to_id: str | None = Field(default=None, alias="replyToId")
    value: _Value


@dataclass(frozen=True, slots=True)
class CardAction:
    """A well-formed click. ``decision`` is set for approve / reject; for ``edit`` the raw
    ``inputs`` (argument name → submitted value) wait for ``coerce_edit``."""

    verb: str
    approval_id: str
    version: str
    clicker: ChatUser
    clicker_mri: str
    clicker_name: str
    conversation_id: str
    reply_to_id: str | None
    automatic: bool
    decision: Decision | None = None
    inputs: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class BadAction:
    """A click that cannot be taken: ``message`` is for the clicker (no internals)."""

    message: str
    status: int = 400


def read_card_action(activity: Mapping[str, Any]) -> CardAction | BadAction:
    """The click in ``activity`` (the invoke's JSON, already authenticated), or why not."""
    try:
        invoke = _Invoke.model_validate(activity)
    except ValidationError as exc:
        log.info("teams card action refused: malformed invoke (%d problems)", exc.error_count())
        return BadAction("This card action could not be read.")
    if invoke.channel_id != "msteams":
        return BadAction("This card action did not come from Teams.")
    tenant = (
        (
            invoke.channel_data.tenant.id
            if invoke.channel_data and invoke.channel_data.tenant
            else None
        )
        or invoke.conversation.tenant_id
        or ""
    )
    user = invoke.from_.aad_object_id
    if not tenant or not user:
        log.info("teams card action refused: no tenant or aadObjectId")
        return BadAction("Your Teams account could not be identified.", status=401)
    action = invoke.value.action
    verb = action.verb
    if action.type not in ("", "Action.Execute") or verb not in DECISION_VERBS | VIEW_VERBS:
        log.info("teams card action refused: unknown verb")
        return BadAction("This card action is not known.")
    data = action.data
    approval_id, version = data.get("approval_id"), data.get("v")
    if not _is_id(approval_id) or not _is_id(version):
        log.info("teams card action refused: bad approval id or card version")
        return BadAction("This card does not name an approval.")
    assert isinstance(approval_id, str)
    assert isinstance(version, str)
    decision: Decision | None = None
    inputs: dict[str, Any] | None = None
    if verb == REJECT_VERB:
        reason = data.get(REJECT_REASON_INPUT)
        if reason is not None and not isinstance(reason, str):
            return BadAction("The reason must be text.")
        reason = (reason or "").strip()[:REASON_LIMIT] or None
        decision = Reject(reason)
    elif verb in DECISION_VERBS and verb != EDIT_VERB:
        decision = Approve()
    elif verb == EDIT_VERB:
        inputs = {
            key[len(ARG_INPUT_PREFIX) :]: value
            for key, value in data.items()
            if isinstance(key, str) and key.startswith(ARG_INPUT_PREFIX)
        }
    return CardAction(
        verb=verb,
        approval_id=approval_id,
        version=version,
        clicker=ChatUser("teams", tenant, user),
        clicker_mri=invoke.from_.id,
        clicker_name=invoke.from_.name[:100],
        conversation_id=invoke.conversation.id,
        reply_to_id=invoke.reply_to_id,
        automatic=invoke.value.trigger == "automatic",
        decision=decision,
        inputs=inputs,
    )


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and value.isprintable()


# --- edited arguments ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EditParsed:
    """The edited arguments as typed values, or the fields that could not be read."""

    args: dict[str, Any]
    field_errors: dict[str, str]


def coerce_edit(
    input_schema: Mapping[str, Any], current: Mapping[str, Any], inputs: Mapping[str, Any]
) -> EditParsed:
    """Read each submitted input as the type the schema gives its argument. An input that
    names no argument of the tool is refused (a forged field), an empty optional input drops
    the argument, an empty required one is an error. The core validates the result again
    (``check_edited_args``): this only turns card strings into the schema's types."""
    fields = {f.name: f for f in edit_fields(input_schema, current)}
    errors: dict[str, str] = {}
    unknown = sorted(name for name in inputs if name not in fields)
    for name in unknown[:5]:
        errors[name[:MAX_ID_CHARS]] = "is not an argument of this tool"
    args: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in inputs:
            if name in current:
                args[name] = current[name]  # not on the card: unchanged
            continue
        raw = inputs[name]
        if isinstance(raw, str) and len(raw) > MAX_VALUE_CHARS:
            errors[name] = f"is too long (over {MAX_VALUE_CHARS} characters)"
            continue
        if raw is None or (isinstance(raw, str) and raw.strip() == "" and field.kind != "string"):
            if field.required:
                errors[name] = "is required"
            continue
        if isinstance(raw, str) and raw == "" and field.kind == "string" and not field.required:
            continue
        try:
            args[name] = _coerce(field, raw)
        except ValueError as exc:
            errors[name] = str(exc)
    return EditParsed(args, errors)


def _coerce(field: InputField, raw: Any) -> Any:
    kind = field.kind
    if kind == "string":
        if not isinstance(raw, str):
            raise ValueError("must be text")
        return raw
    if kind == "enum":
        options = list(field.schema.get("enum") or [])
        for option in options:
            if raw == option or (isinstance(raw, str) and raw == _as_choice(option)):
                return option
        shown = ", ".join(_as_choice(o) for o in options[:10])
        raise ValueError(f"must be one of: {shown}")
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise ValueError("must be true or false")
    if kind in ("integer", "number"):
        return _number(raw, integer=kind == "integer")
    if isinstance(raw, str):
        try:
            return parse_json(raw)
        except ValueError:
            raise ValueError("must be valid JSON") from None
    return raw


def _number(raw: Any, *, integer: bool) -> int | float:
    if isinstance(raw, bool):
        raise ValueError("must be a number")
    value: int | float
    if isinstance(raw, int | float):
        value = raw
    elif isinstance(raw, str):
        text = raw.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise ValueError("must be a number") from None
    else:
        raise ValueError("must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    return value


def _as_choice(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


# --- invoke responses ---------------------------------------------------------------------


def card_response(card: Card) -> dict[str, Any]:
    """The clicker's view is replaced by ``card``."""
    return {"statusCode": 200, "type": CONTENT_TYPE, "value": card}


def error_response(status: int, message: str) -> dict[str, Any]:
    """A refusal the client shows; ``message`` is for people (no internals)."""
    code = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}
    return {
        "statusCode": status,
        "type": "application/vnd.microsoft.error",
        "value": {"code": code.get(status, "BadRequest"), "message": message},
    }
