"""The App Home tab: the user's link status and a Refresh button, their servers and whether
opsbot reaches them as the user, their latest requests (state and arguments), the ones
waiting for their decision (with the card's own Approve / Edit / Reject buttons, so a click
takes the card's decision path), and what opsbot remembers (with a *Forget all* button).

``/ops memory ...`` itself is one verb of the ``/ops`` command (``listeners``), answered by
``AssistantPort.memory_command``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.slack.cards import decision_buttons, state_line
from bot.slack.core import ApprovalView, Remembered, ServerConnection, UserStatus, args_summary
from bot.slack.render import (
    Block,
    approval_line,
    connect_prompt,
    context,
    escape,
    section,
    slack_date,
    status_text,
)

HOME_BLOCK_LIMIT = 100
FORGET_ACTION_ID = "memory_forget_all"
REFRESH_ACTION_ID = "home_refresh"


def refresh_button() -> Block:
    return {
        "type": "actions",
        "block_id": "home_top",
        "elements": [
            {
                "type": "button",
                "action_id": REFRESH_ACTION_ID,
                "text": {"type": "plain_text", "text": "Refresh"},
                "value": "home",
            }
        ],
    }


def home_view(
    status: UserStatus,
    requests: Sequence[ApprovalView],
    awaiting: Sequence[ApprovalView],
    remembered: Remembered | None = None,
    connections: Sequence[ServerConnection] = (),
    *,
    standard_connect: bool = False,
) -> dict[str, Any]:
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": "opsbot"}},
        section(status_text(status)),
        refresh_button(),
    ]
    if not status.linked:
        if status.login_url:
            blocks += connect_prompt(status.login_url, standard=standard_connect).blocks[1:]
        return {"type": "home", "blocks": blocks}
    if connections:
        blocks += connection_blocks(connections)
    blocks.append({"type": "divider"})
    blocks.append(section("*Your requests*"))
    if requests:
        blocks += [section(request_line(v)) for v in requests]
    else:
        blocks.append(context("You have not asked for any change yet."))
    if awaiting:
        blocks.append({"type": "divider"})
        blocks.append(section("*Waiting for your decision*"))
        for view in awaiting:
            if len(blocks) > HOME_BLOCK_LIMIT - 12:  # room for the preferences below
                blocks.append(context("More requests are waiting: see the approvals channel."))
                break
            blocks.append(section(approval_line(view)))
            blocks.append(decision_buttons(view.approval_id))
    if remembered is not None:
        blocks += memory_blocks(remembered)
    return {"type": "home", "blocks": blocks[:HOME_BLOCK_LIMIT]}


def request_line(view: ApprovalView) -> str:
    """One of the user's requests: its state first, then what it does with which arguments."""
    what = f"`{escape(view.server)}` · `{escape(view.tool)}` ({escape(args_summary(view.args))})"
    # ``state`` is the finer one; a view that never left ``pending`` there has ``status``.
    state = view.status if view.state == "pending" else view.state
    expiry = f" — expires {slack_date(view.expires_at)}" if state == "pending" else ""
    return f"{state_line(state, view.outcome_reason)}\n{what}{expiry}"


def connection_blocks(connections: Sequence[ServerConnection]) -> list[Block]:
    lines = [
        f":white_check_mark: `{escape(c.server)}` — connected"
        if c.connected
        else f":warning: `{escape(c.server)}` — {escape(c.problem or 'not connected')}"
        for c in connections
    ]
    return [{"type": "divider"}, section("*Your servers*\n" + "\n".join(lines))]


def memory_blocks(remembered: Remembered) -> list[Block]:
    """A divider, what is remembered, and a button to forget it (when there is something)."""
    blocks: list[Block] = [{"type": "divider"}, section("*Your preferences*")]
    if remembered.empty:
        blocks.append(context("opsbot remembers nothing about you. Set some with `/ops memory`."))
        return blocks
    blocks.append(section(remembered.text))
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": FORGET_ACTION_ID,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Forget all"},
                    "value": "all",
                }
            ],
        }
    )
    return blocks
