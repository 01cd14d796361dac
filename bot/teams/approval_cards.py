"""Approval cards for Teams: Adaptive Card 1.5 JSON from ``assistant.types``, pure functions.

The same facts and words as the Slack card (``bot/slack/cards.py``); state words come from
``assistant.outcomes``. Four cards (``/work/shared/reference/teams-notes.md`` §4):

- ``base_card``: read-only, what everyone in the channel sees. Its ``refresh`` (verb
  ``approval.view``, ``userIds`` = the eligible approvers' MRIs) makes Teams fetch each
  approver's own view from the bot;
- ``approver_card``: the base card plus Approve / Edit / Reject (``Action.Execute``), returned
  only to an eligible approver; with ``fallback: "drop"`` so an old client shows no button;
- ``edit_card``: one input per argument, generated from the tool's input schema, current
  values = the arguments, field errors beside their inputs; "Approve with edits" (verb
  ``edit``) and Back;
- ``decided_card``: the outcome, no actions and no refresh (so nobody gets buttons again).

``data`` of every action holds only the approval id and ``v``, a digest of what the card shows
(tool and arguments): the record is the truth, and a click on a stale card is refused. Text
that comes from outside (arguments, descriptions, reasons) goes in ``TextRun``s, which Teams
never reads as markdown, so a ticket cannot smuggle a link into the card.

Example::

    card = base_card(view, approver_mris=["29:bob"])          # post this to the channel
    card = approver_card(view, approver_mris=["29:bob"])      # the refresh answer for bob
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.teams.core import ApprovalView, Decided, describe_state, normalise_state

Card = dict[str, Any]

CARD_VERSION = "1.5"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"

# Verbs (``Action.Execute.verb``). Views never decide; decisions go to ``AssistantPort.decide``.
VIEW_VERB = "approval.view"
EDIT_VIEW_VERB = "approval.edit_view"
APPROVE_VERB = "approve"
REJECT_VERB = "reject"
EDIT_VERB = "edit"
DECISION_VERBS = frozenset({APPROVE_VERB, REJECT_VERB, EDIT_VERB})
VIEW_VERBS = frozenset({VIEW_VERB, EDIT_VIEW_VERB})

# Input ids: arguments under a prefix, so no argument can shadow ``approval_id`` or ``v``.
ARG_INPUT_PREFIX = "arg."
REJECT_REASON_INPUT = "reject_reason"

MAX_REFRESH_USERS = 60  # Teams refreshes at most 60 listed users
VALUE_PREVIEW_LIMIT = 500  # as on Slack
REASON_LIMIT = 500
MAX_CARD_BYTES = 80_000  # Teams refuses messages over ~100 KB; stay well below

_STATE_MARK = {
    "succeeded": "✅",
    "failed": "❌",
    "unknown": "❔",
    "rejected": "⛔",
    "expired": "⌛",
    "withdrawn": "↩️",
}
_STATE_COLOR = {
    "succeeded": "Good",
    "failed": "Attention",
    "unknown": "Warning",
    "rejected": "Attention",
    "expired": "Warning",
    "withdrawn": "Warning",
}
_DECISION_LABEL = {
    "approved": "✅ Approved",
    "edited": "✏️ Approved with edits",
    "rejected": "⛔ Rejected",
    "expired": "⌛ Expired",
    "withdrawn": "↩️ Withdrawn",
}


# --- small builders -----------------------------------------------------------------------


def _text(text: str, **extra: Any) -> Card:
    """Our own words (labels, dates): a markdown ``TextBlock``."""
    return {"type": "TextBlock", "text": text, "wrap": True, **extra}


def _plain(text: str, *, monospace: bool = False, **run: Any) -> Card:
    """Text from outside (arguments, descriptions, reasons): a ``TextRun`` is never markdown."""
    text_run: Card = {"type": "TextRun", "text": text, **run}
    if monospace:
        text_run["fontType"] = "Monospace"
    return {"type": "RichTextBlock", "inlines": [text_run]}


def _labelled(label: str, value: str, *, monospace: bool = False) -> Card:
    """``label: value`` on one line; the value stays plain text."""
    return {
        "type": "RichTextBlock",
        "inlines": [
            {"type": "TextRun", "text": f"{label}: ", "weight": "Bolder"},
            {
                "type": "TextRun",
                "text": value,
                **({"fontType": "Monospace"} if monospace else {}),
            },
        ],
    }


def _card(body: list[Card], *, fallback_text: str, refresh: Card | None = None) -> Card:
    card: Card = {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "fallbackText": fallback_text,
        "body": body,
    }
    if refresh is not None:
        card["refresh"] = refresh
    return card


def _preview(value: Any, limit: int = VALUE_PREVIEW_LIMIT) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


def _date(when: datetime) -> str:
    """Teams shows the date and time in the reader's own zone and locale."""
    iso = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{{{{DATE({iso}, SHORT)}}}} {{{{TIME({iso})}}}}"


def card_digest(view: ApprovalView) -> str:
    """``v``: what the card shows that a decision depends on (tool and arguments). A click
    carrying another ``v`` was made on a card that no longer shows what would run."""
    shown = json.dumps(
        [view.approval_id, view.server, view.tool, view.args], sort_keys=True, default=str
    )
    return hashlib.sha256(shown.encode()).hexdigest()[:16]


def action_data(view: ApprovalView) -> dict[str, str]:
    return {"approval_id": view.approval_id, "v": card_digest(view)}


def _execute(title: str, verb: str, view: ApprovalView, **extra: Any) -> Card:
    return {
        "type": "Action.Execute",
        "title": title,
        "verb": verb,
        "data": action_data(view),
        **extra,
    }


def _refresh(view: ApprovalView, approver_mris: Sequence[str]) -> Card:
    # Only listed users get their own view; the requester is never among them (no
    # self-approval from a refreshed card), and Teams stops at 60.
    users = list(dict.fromkeys(m for m in approver_mris if m))[:MAX_REFRESH_USERS]
    return {"action": _execute("Refresh", VIEW_VERB, view), "userIds": users}


# --- the card's facts (shared by every card) --------------------------------------------


def _title(view: ApprovalView) -> str:
    return f"Approval: {view.server} · {view.tool}"


def _args_blocks(args: Mapping[str, Any]) -> list[Card]:
    if not args:
        return [_text("_no arguments_", isSubtle=True)]
    return [_labelled(f"• {key}", _preview(value), monospace=True) for key, value in args.items()]


def _reads_blocks(reads: Sequence[str]) -> list[Card]:
    if not reads:
        return [_text("_no reads before this proposal_", isSubtle=True)]
    return [_plain(f"{i}. {read}") for i, read in enumerate(reads, start=1)]


def _body(view: ApprovalView, *, with_args: bool = True) -> list[Card]:
    body: list[Card] = [
        _text(_escape_md(_title(view)), size="Large", weight="Bolder", style="heading"),
        {
            "type": "FactSet",
            "facts": [
                {"title": "Requester", "value": _escape_md(view.requester)},
                {"title": "Tool", "value": _escape_md(view.tool)},
                {"title": "Server", "value": _escape_md(view.server)},
                {"title": "Expires", "value": _date(view.expires_at)},
            ],
        },
    ]
    if view.description:
        body.append(_plain(_preview(view.description, 1000)))
    if with_args:
        if view.original_args is not None and view.original_args != view.args:
            # What runs is the edited arguments, marked; what was proposed stays visible.
            who = view.edited_by or "the approver"
            body.append(_labelled("Arguments", f"✏️ edited by {who}"))
            body += _args_blocks(view.args)
            body.append(_text("**Originally proposed**", separator=True))
            body += _args_blocks(view.original_args)
        else:
            body.append(_text("**Arguments**", separator=True))
            body += _args_blocks(view.args)
    body.append(_text("**Chain of reads**", separator=True))
    body += _reads_blocks(view.reads)
    return body


def _escape_md(text: str) -> str:
    """Our labels may carry outside names (tool, requester): no markdown in them."""
    out = []
    for ch in text:
        out.append("\\" + ch if ch in "\\`*_{}[]()#+-.!<>|~" else ch)
    return "".join(out)


def _fits(card: Card, shrink: list[Card], view: ApprovalView) -> Card:
    """Keep the card under Teams' message limit: past it, argument values are cut harder
    (the record keeps them whole) and, last, the chain of reads is summarised."""
    if len(json.dumps(card, ensure_ascii=False).encode()) <= MAX_CARD_BYTES:
        return card
    for block in shrink:
        for run in block.get("inlines", []):
            text = run.get("text", "")
            if len(text) > 80:
                run["text"] = text[:80] + "…"
    if len(json.dumps(card, ensure_ascii=False).encode()) <= MAX_CARD_BYTES:
        return card
    card["body"] = [
        b for b in card["body"] if not (b.get("type") == "RichTextBlock" and b in shrink)
    ] + [_text(f"{len(view.reads)} reads and {len(view.args)} arguments: too long to show here.")]
    return card


# --- A: read-only base card --------------------------------------------------------------


def base_card(view: ApprovalView, approver_mris: Sequence[str]) -> Card:
    """What everyone sees; eligible approvers (``approver_mris``, Teams MRIs ``29:…``) get
    ``approver_card`` through the refresh."""
    body = [*_body(view), _text("Waiting for an approver.", isSubtle=True, separator=True)]
    card = _card(
        body,
        fallback_text=f"Approval needed: {view.server} · {view.tool} for {view.requester}",
        refresh=_refresh(view, approver_mris),
    )
    return _fits(card, [b for b in body if b.get("type") == "RichTextBlock"], view)


# --- B: the approver's view -------------------------------------------------------------


def approver_card(view: ApprovalView, approver_mris: Sequence[str]) -> Card:
    """The base card with Approve / Edit / Reject for one eligible approver. Reject asks for
    an optional reason first (a ``ShowCard``), like Slack asks before approving."""
    body = _body(view)
    reject = _card(
        [
            {
                "type": "Input.Text",
                "id": REJECT_REASON_INPUT,
                "label": "Reason (optional, shown to the requester)",
                "isMultiline": True,
                "maxLength": REASON_LIMIT,
            }
        ],
        fallback_text="Reject",
    )
    del reject["$schema"], reject["version"], reject["fallbackText"]  # a ShowCard's own card
    reject["actions"] = [_execute("Reject", REJECT_VERB, view, style="destructive")]
    actions: list[Card] = [
        _execute("Approve", APPROVE_VERB, view, style="positive"),
        _execute("Edit", EDIT_VIEW_VERB, view),
        {"type": "Action.ShowCard", "title": "Reject…", "card": reject},
    ]
    body.append(
        _text("It runs as the requester, with the arguments shown.", isSubtle=True, separator=True)
    )
    # Old clients without Action.Execute must not show a button that cannot work.
    body.append({"type": "ActionSet", "actions": actions, "fallback": "drop"})
    card = _card(
        body,
        fallback_text=f"Approval needed: {view.server} · {view.tool} for {view.requester}",
        refresh=_refresh(view, approver_mris),
    )
    return _fits(card, [b for b in body if b.get("type") == "RichTextBlock"], view)


# --- C: edit ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    """One argument as an input: its JSON-schema kind and what the input needs."""

    name: str
    kind: str  # string | integer | number | boolean | enum | json
    required: bool
    schema: Mapping[str, Any]


def _kind(schema: Mapping[str, Any]) -> str:
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return "enum"
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first real type
        kind = next((k for k in kind if k != "null"), None)
    if kind is None:
        for option in schema.get("anyOf") or schema.get("oneOf") or []:
            if isinstance(option, Mapping) and option.get("type") not in (None, "null"):
                return _kind(option)
    return str(kind) if kind in ("string", "integer", "number", "boolean") else "json"


def edit_fields(input_schema: Mapping[str, Any], args: Mapping[str, Any]) -> list[Field]:
    """The inputs of the edit card, in schema order, then any argument the schema does not
    name (shown and edited as JSON; the core's validation decides whether it is allowed)."""
    props = input_schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = input_schema.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    fields = [
        Field(
            str(name),
            _kind(spec if isinstance(spec, Mapping) else {}),
            name in required_names,
            spec if isinstance(spec, Mapping) else {},
        )
        for name, spec in props.items()
    ]
    known = {f.name for f in fields}
    fields += [Field(name, "json", False, {}) for name in args if name not in known]
    return fields


def _input(field: Field, value: Any, present: bool) -> Card:
    spec = field.schema
    label = str(spec.get("title") or field.name)
    common: Card = {"id": ARG_INPUT_PREFIX + field.name, "label": label}
    if field.required:
        common["isRequired"] = True
        common["errorMessage"] = f"{label} is required"
    if field.kind == "enum":
        choices = [{"title": str(c), "value": _choice_value(c)} for c in spec["enum"]]
        element: Card = {"type": "Input.ChoiceSet", "style": "compact", "choices": choices}
        if present:
            element["value"] = _choice_value(value)
    elif field.kind == "boolean":
        element = {"type": "Input.Toggle", "title": label, "valueOn": "true", "valueOff": "false"}
        element["value"] = "true" if present and value is True else "false"
    elif field.kind in ("integer", "number"):
        element = {"type": "Input.Number"}
        for key, name in (("minimum", "min"), ("maximum", "max")):
            if isinstance(spec.get(key), int | float) and not isinstance(spec.get(key), bool):
                element[name] = spec[key]
        if present and isinstance(value, int | float) and not isinstance(value, bool):
            element["value"] = value
    else:
        element = {"type": "Input.Text"}
        text = value if field.kind == "string" and isinstance(value, str) else None
        if text is None and present:
            text = json.dumps(value, ensure_ascii=False)
        if text is not None:
            element["value"] = text
        if isinstance(spec.get("maxLength"), int) and field.kind == "string":
            element["maxLength"] = spec["maxLength"]
        if field.kind == "json" or (text is not None and ("\n" in text or len(text) > 80)):
            element["isMultiline"] = True
    if isinstance(spec.get("description"), str) and spec["description"]:
        element["placeholder"] = _preview(spec["description"], 200)
    return {**element, **common}


def _choice_value(value: Any) -> str:
    """ChoiceSet values are strings; a non-string enum member is written as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def edit_card(
    view: ApprovalView,
    approver_mris: Sequence[str],
    *,
    values: Mapping[str, Any] | None = None,
    field_errors: Mapping[str, str] | None = None,
) -> Card:
    """The edit view for one approver: an input per argument (current values = ``values``,
    else the arguments), each field error in red under its input, then "Approve with edits"
    (verb ``edit``) and Back. The tool cannot change, only its arguments."""
    args = dict(view.args if values is None else values)
    errors = dict(field_errors or {})
    body = _body(view, with_args=False)
    body.append(_text("**Edit the arguments**", separator=True))
    fields = edit_fields(view.input_schema, view.args)
    for field in fields:
        body.append(_input(field, args.get(field.name), field.name in args))
        if field.name in errors:
            body.append(_plain(f"⚠ {errors.pop(field.name)}", color="Attention"))
    for name, message in errors.items():  # errors not tied to one input
        label = "" if name in ("", "_", "__root__") else f"{name}: "
        body.append(_plain(f"⚠ {label}{message}", color="Attention"))
    body.append(
        {
            "type": "ActionSet",
            "actions": [
                _execute("Approve with edits", EDIT_VERB, view, style="positive"),
                _execute("Back", VIEW_VERB, view, associatedInputs="none"),
            ],
            "fallback": "drop",
        }
    )
    return _card(
        body,
        fallback_text=f"Edit: {view.server} · {view.tool}",
        refresh=_refresh(view, approver_mris),
    )


# --- D: after a decision ----------------------------------------------------------------


def decision_of(view: ApprovalView) -> str:
    """``approved | edited | rejected | expired | withdrawn`` from the record's state."""
    state = normalise_state(view.status or view.state)
    if state in ("rejected", "expired", "withdrawn"):
        return state
    return "edited" if view.edited_by else "approved"


def state_line(state: str, reason: str | None) -> str:
    """``describe_state`` with a mark: the one wording of an outcome (as on Slack)."""
    key = normalise_state(state)
    return f"{_STATE_MARK.get(key, 'ℹ️')} {describe_state(key, reason)}"


def decided_card(
    view: ApprovalView | None,
    approval_id: str,
    *,
    decided: Decided | None = None,
) -> Card:
    """The card after a decision, for everyone: the same facts, who decided what, and the
    outcome in ``describe_state``'s words. No actions, no refresh: nobody gets buttons again.
    ``decided`` (fresh from the decision) wins over the view's state, which may lag."""
    if decided is not None:
        decision, by = decided.decision, decided.decided_by
        state = decided.state or decided.outcome
        reason = decided.outcome_reason
    elif view is not None:
        decision, by = decision_of(view), view.decided_by or ""
        state, reason = view.status or view.state, view.outcome_reason
    else:
        raise ValueError("decided_card needs the approval's view or its decision")
    key = normalise_state(state)
    label = _DECISION_LABEL.get(decision, decision)
    by_text = f" by {by}" if by and decision != "expired" else ""
    status: list[Card] = [
        _text(f"**{_escape_md(label + by_text)}**", separator=True),
        {
            "type": "RichTextBlock",
            "inlines": [
                {"type": "TextRun", "text": "Outcome: ", "weight": "Bolder"},
                {
                    "type": "TextRun",
                    "text": state_line(key, reason)[: REASON_LIMIT + 80],
                    "color": _STATE_COLOR.get(key, "Default"),
                },
            ],
        },
    ]
    if view is None:
        body = [*status, _plain(f"Approval {approval_id}", isSubtle=True)]
        title = f"Approval {approval_id}"
    else:
        body = [*_body(view), *status]
        title = f"{view.server} · {view.tool}"
    card = _card(body, fallback_text=f"{label}{by_text}: {describe_state(key, reason)} ({title})")
    return card if view is None else _fits(card, [b for b in body[:-1] if "inlines" in b], view)


def deciding_card(view: ApprovalView, who: str, verb: str = "Approving") -> Card:
    """The clicker's card while the decision runs: facts, "Approving… (bob)", no buttons."""
    status = _text(f"⏳ **{_escape_md(verb)}…** ({_escape_md(who)})", separator=True)
    return _card(
        [*_body(view), status], fallback_text=f"{verb}… ({who}): {view.server} · {view.tool}"
    )


def notice_card(text: str, view: ApprovalView | None = None) -> Card:
    """A short notice for the clicker only (refused, already decided): our words, plain."""
    body = [_plain(text)]
    if view is not None:
        body = [*_body(view), _plain(text, color="Attention")]
    return _card(body, fallback_text=text)
