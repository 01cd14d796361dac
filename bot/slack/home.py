"""The App Home tab: the user's link status, their pending requests, the ones waiting for
their decision, and what opsbot remembers about them (with a *Forget all* button).

``/ops memory ...`` itself is one verb of the ``/ops`` command (``listeners``), answered by
``AssistantPort.memory_command``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.slack.cards import decision_buttons
from bot.slack.core import ApprovalView, Remembered, UserStatus
from bot.slack.render import (
    Block,
    approval_line,
    bullet_lines,
    connect_prompt,
    context,
    section,
    sections,
    status_text,
)

HOME_BLOCK_LIMIT = 100
FORGET_ACTION_ID = "memory_forget_all"


def home_view(
    status: UserStatus,
    pending: Sequence[ApprovalView],
    awaiting: Sequence[ApprovalView],
    remembered: Remembered | None = None,
) -> dict[str, Any]:
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": "opsbot"}},
        section(status_text(status)),
    ]
    if not status.linked:
        if status.login_url:
            blocks += connect_prompt(status.login_url).blocks[1:]
        return {"type": "home", "blocks": blocks}
    if remembered is not None:
        blocks += memory_blocks(remembered)
    blocks.append({"type": "divider"})
    blocks.append(section("*Your pending requests*"))
    if pending:
        blocks += sections(bullet_lines(approval_line(v) for v in pending))
    else:
        blocks.append(context("Nothing is waiting for approval."))
    if awaiting:
        blocks.append({"type": "divider"})
        blocks.append(section("*Waiting for your decision*"))
        for view in awaiting:
            if len(blocks) > HOME_BLOCK_LIMIT - 3:
                blocks.append(context("More requests are waiting: see the approvals channel."))
                break
            blocks.append(section(approval_line(view)))
            blocks.append(decision_buttons(view.approval_id))
    return {"type": "home", "blocks": blocks[:HOME_BLOCK_LIMIT]}


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
