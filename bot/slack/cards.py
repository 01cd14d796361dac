"""Approval cards: the pending call for approvers, and the same card after a decision.

Buttons carry only the approval id (``value``); the arguments stay server-side.
"""

from __future__ import annotations

import json
from typing import Any

from bot.slack.core import ApprovalView, describe_state, normalise_state
from bot.slack.render import Block, Message, context, escape, section, sections, slack_date

APPROVE_ACTION_ID = "approval_approve"
EDIT_ACTION_ID = "approval_edit"
REJECT_ACTION_ID = "approval_reject"
ACTIONS_BLOCK_ID = "approval_decision"
VALUE_PREVIEW_LIMIT = 500


def format_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > VALUE_PREVIEW_LIMIT:
        text = text[:VALUE_PREVIEW_LIMIT] + "…"
    return f"`{escape(text)}`" if "\n" not in text else f"```{escape(text)}```"


def args_text(args: dict[str, Any]) -> str:
    if not args:
        return "_no arguments_"
    return "\n".join(f"• *{escape(k)}*: {format_value(v)}" for k, v in args.items())


def reads_line(reads: list[str]) -> str:
    """The chain of reads that led to the proposal, folded into one context line."""
    if not reads:
        return ":mag: _no reads before this proposal_"
    return ":mag: Read first: " + " → ".join(escape(r) for r in reads)


def risk_alert(view: ApprovalView) -> Block:
    """The risk and the deadline, in Slack's ``alert`` block: what approving does, and until
    when it can be approved."""
    return {
        "type": "alert",
        "level": "warning",
        "text": {
            "type": "mrkdwn",
            "text": (
                f"Approving runs this change on *{escape(view.server)}* as the requester, "
                f"with the arguments below. Expires {slack_date(view.expires_at)}."
            ),
        },
    }


def decision_buttons(approval_id: str) -> Block:
    return {
        "type": "actions",
        "block_id": ACTIONS_BLOCK_ID,
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE_ACTION_ID,
                "text": {"type": "plain_text", "text": "Approve"},
                "style": "primary",
                "value": approval_id,
                "confirm": {
                    "title": {"type": "plain_text", "text": "Approve this change?"},
                    "text": {
                        "type": "mrkdwn",
                        "text": "It runs now, as the requester, with the arguments shown.",
                    },
                    "confirm": {"type": "plain_text", "text": "Approve"},
                    "deny": {"type": "plain_text", "text": "Cancel"},
                },
            },
            {
                "type": "button",
                "action_id": EDIT_ACTION_ID,
                "text": {"type": "plain_text", "text": "Edit"},
                "value": approval_id,
            },
            {
                "type": "button",
                "action_id": REJECT_ACTION_ID,
                "text": {"type": "plain_text", "text": "Reject"},
                "style": "danger",
                "value": approval_id,
            },
        ],
    }


def _card_body(view: ApprovalView, *, pending: bool = True) -> list[Block]:
    # Each fact once: server and tool in the header, people in the fields, risk and expiry
    # in the alert (only while it can still be approved), the reads in one context line.
    fields = [{"type": "mrkdwn", "text": f"*Requested by*\n{_requester(view)}"}]
    if view.approver_group:
        fields.append({"type": "mrkdwn", "text": f"*Approvers*\n{escape(view.approver_group)}"})
    blocks: list[Block] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": f"{view.server} · {view.tool}"[:150]},
        },
        {"type": "section", "fields": fields},
    ]
    if pending:
        blocks.append(risk_alert(view))
    if view.description:
        blocks += sections(escape(view.description))
    if view.original_args is not None and view.original_args != view.args:
        # The card shows what runs: the edited arguments, marked, and what was proposed.
        who = escape(view.edited_by or "the approver")
        blocks += sections(f"*Arguments* (:pencil2: edited by {who})\n" + args_text(view.args))
        blocks += sections("*Originally proposed*\n" + args_text(view.original_args))
    else:
        blocks += sections("*Arguments*\n" + args_text(view.args))
    blocks.append(context(reads_line(view.reads)))
    return blocks


def _requester(view: ApprovalView) -> str:
    if view.requester_chat_user is not None and view.requester_chat_user.platform == "slack":
        return f"<@{view.requester_chat_user.user_id}> ({escape(view.requester)})"
    return escape(view.requester)


def approval_card(view: ApprovalView) -> Message:
    blocks = [*_card_body(view), decision_buttons(view.approval_id)]
    return Message(
        text=f"Approval needed: {view.server} · {view.tool} for {view.requester}",
        blocks=blocks[-50:] if len(blocks) > 50 else blocks,
    )


def deciding_card(view: ApprovalView, who: str, verb: str = "Approving") -> Message:
    """The card the moment someone clicks: the same facts, "Approving… (bob)", no buttons —
    shown before any slow work, so nobody clicks a card that is already being decided."""
    status = context(f":hourglass_flowing_sand: *{escape(verb)}…* ({who})")
    blocks = [*_card_body(view, pending=False), status]
    return Message(text=f"{verb}… ({who}): {view.server} · {view.tool}", blocks=blocks[-50:])


def deciding_from_blocks(blocks: list[Block], who: str, verb: str = "Approving") -> Message | None:
    """``deciding_card`` from the clicked card's own blocks (Slack sends them with the click),
    without a database read; ``None`` if they are not a pending card's."""
    if not any(b.get("block_id") == ACTIONS_BLOCK_ID for b in blocks):
        return None
    # No buttons, and no "expires" alert: it is being decided now.
    kept = [b for b in blocks if b.get("block_id") != ACTIONS_BLOCK_ID and b.get("type") != "alert"]
    header = next((b for b in kept if b.get("type") == "header"), None)
    title = str(((header or {}).get("text") or {}).get("text", "approval"))
    status = context(f":hourglass_flowing_sand: *{escape(verb)}…* ({who})")
    return Message(text=f"{verb}… ({who}): {title}"[:3000], blocks=[*kept, status][-50:])


_STATE_EMOJI = {
    "succeeded": ":white_check_mark:",
    "failed": ":x:",
    "unknown": ":grey_question:",
    "rejected": ":no_entry:",
    "expired": ":hourglass:",
    "withdrawn": ":leftwards_arrow_with_hook:",
}


def state_line(state: str, reason: str | None) -> str:
    """``describe_state`` with an emoji: the one wording of an outcome on Slack."""
    key = normalise_state(state)
    emoji = _STATE_EMOJI.get(key, ":information_source:")
    return f"{emoji} {escape(describe_state(key, reason))}"


_DECISION_LABEL = {
    "approved": ":white_check_mark: Approved",
    "edited": ":pencil2: Approved with edits",
    "rejected": ":no_entry: Rejected",
    "expired": ":hourglass: Expired",
    "withdrawn": ":leftwards_arrow_with_hook: Withdrawn",
}


def decided_card(
    view: ApprovalView | None,
    approval_id: str,
    decision: str,
    decided_by: str,
    outcome: str,
    *,
    state: str | None = None,
    reason: str | None = None,
) -> Message:
    """The card after a decision: the same facts, the decision and outcome; no buttons.
    With ``state`` the outcome is worded by ``describe_state`` (as everywhere else)."""
    label = _DECISION_LABEL.get(decision, escape(decision))
    by = f" by {decided_by}" if decided_by else ""
    shown = state_line(state, reason) if state else escape(outcome) or "—"
    status = section(f"*{label}*{by}\n*Outcome:* {shown}")
    if state:
        outcome = describe_state(state, reason)
    if view is None:
        blocks = [status, context(f"Approval `{escape(approval_id)}`")]
    else:
        blocks = [*_card_body(view, pending=False), status]
    return Message(text=f"{label}{by}: {outcome}"[:3000], blocks=blocks[:50])
