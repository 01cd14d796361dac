"""Block Kit for replies: answers (split within Slack's limits), prompts, refusals.

Limits (Slack): section text ≤ 3,000 chars, 50 blocks a message, 100 in a Home view,
button text ≤ 75 chars. Every function returns plain dicts ready for the Web API.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.slack.core import (
    Answer,
    ApprovalView,
    Source,
    UserStatus,
    args_summary,
    describe_state,
)

Block = dict[str, Any]

SECTION_TEXT_LIMIT = 3000
MESSAGE_BLOCK_LIMIT = 50
AUTH_PROVIDER_VALUE = "opsbot-company-account"
# Slack fixes these action ids for the auth_provider block's buttons.
AUTH_PROVIDER_CONNECT_ACTION_ID = "auth_provider_connect"
AUTH_PROVIDER_DISCONNECT_ACTION_ID = "auth_provider_disconnect"
CONNECT_ACTION_ID = "connect_account"
CONNECT_SERVER_ACTION_ID = "connect_server"

_MD_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_MD_BOLD = re.compile(r"\*\*([^*\n]+)\*\*")


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message: its blocks and the plain-text fallback (notifications, screen readers)."""

    text: str
    blocks: list[Block]


def escape(text: str) -> str:
    """Slack's three control characters, so user or tool text cannot form mentions or links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str, allowed_links: frozenset[str] = frozenset()) -> str:
    """The common Markdown the model writes → Slack mrkdwn (links, bold), text escaped.

    Only a URL in ``allowed_links`` (those the tool results carried) becomes a link; any
    other Markdown link keeps just its label: a model-written URL is never clickable."""
    text = escape(markdown)
    text = _MD_LINK.sub(
        lambda m: (
            f"<{m.group(2)}|{m.group(1)}>"
            if m.group(2).replace("&amp;", "&") in allowed_links
            else m.group(1)
        ),
        text,
    )
    return _MD_BOLD.sub(r"*\1*", text)


def split_text(text: str, limit: int = SECTION_TEXT_LIMIT) -> list[str]:
    """Split at paragraph, then line, then word boundaries; no chunk exceeds ``limit``."""
    chunks: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        cut = -1
        for sep in ("\n\n", "\n", " "):
            cut = rest.rfind(sep, 0, limit)
            if cut > 0:
                break
        if cut <= 0:
            cut = limit
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        chunks.append(rest)
    return chunks


def section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:SECTION_TEXT_LIMIT]}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:3000]}]}


def sections(text: str) -> list[Block]:
    return [section(chunk) for chunk in split_text(text)]


def source_link(source: Source) -> str:
    label = escape(f"{source.system} {source.id}".strip())
    if source.link and source.link.startswith(("http://", "https://")):
        return f"<{source.link}|{label}>"
    return label


def bullet_lines(lines: Iterable[str]) -> str:
    return "\n".join(f"• {line}" for line in lines)


def answer_blocks(answer: Answer) -> list[Block]:
    allowed = frozenset(s.link for s in answer.sources if s.link)
    blocks = sections(to_mrkdwn(answer.answer, allowed) or "_(no answer)_")
    if answer.sources:
        blocks += sections("*Sources*\n" + bullet_lines(source_link(s) for s in answer.sources))
    if answer.actions_taken:
        blocks += sections(
            "*Actions taken*\n" + bullet_lines(escape(a) for a in answer.actions_taken)
        )
    if answer.pending_approvals:
        blocks += sections(
            "*Waiting for approval*\n" + bullet_lines(escape(p) for p in answer.pending_approvals)
        )
    for caveat in answer.caveats:
        blocks.append(context(f":warning: {escape(caveat)}"))
    return blocks


def paginate(
    blocks: Sequence[Block], fallback: str, limit: int = MESSAGE_BLOCK_LIMIT
) -> list[Message]:
    """Blocks → as many messages as needed, each within the block limit."""
    pages = [list(blocks[i : i + limit]) for i in range(0, len(blocks), limit)] or [[]]
    text = fallback[:SECTION_TEXT_LIMIT]
    return [
        Message(text=text if i == 0 else f"{text[:60]}… (continued)", blocks=page)
        for i, page in enumerate(pages)
    ]


def answer_messages(answer: Answer, header: str | None = None) -> list[Message]:
    blocks = ([context(header)] if header else []) + answer_blocks(answer)
    fallback = answer.answer or "answer"
    return paginate(blocks, f"{header}\n{fallback}" if header else fallback)


def text_message(text: str) -> Message:
    return Message(text=text[:SECTION_TEXT_LIMIT], blocks=sections(text))


def connect_prompt(login_url: str, *, standard: bool = False) -> Message:
    """Ask the user to connect their company account: opsbot's Connect button, or with
    ``standard`` (Slack's standardized app authentication) an ``auth_provider`` block whose
    Connect opens the same login."""
    text = (
        "To answer as you, opsbot needs to know who you are in the company directory. "
        "Connect your account once; then ask again."
    )
    button: Block = {
        "type": "actions",
        "block_id": "connect",
        "elements": [
            {
                "type": "button",
                "action_id": CONNECT_ACTION_ID,
                "text": {"type": "plain_text", "text": "Connect your account"},
                "url": login_url,
                "style": "primary",
            }
        ],
    }
    return Message(
        text="Connect your account to use opsbot",
        blocks=[section(text), auth_provider_block(login_url) if standard else button],
    )


def server_connect_prompt(server: str, connect_url: str) -> Message:
    """*Connect <server>*: the user signs in at that server's own authorization server once
    (an MCP server in ``auth: oauth`` mode); the button's value names the server."""
    name = escape(server)
    text = (
        f"To use *{name}* for you, opsbot needs you to sign in there once. "
        "Connect it; then ask again."
    )
    return Message(
        text=f"Connect {server} to use it through opsbot",
        blocks=[
            section(text),
            {
                "type": "actions",
                "block_id": "connect_server",
                "elements": [
                    {
                        "type": "button",
                        "action_id": CONNECT_SERVER_ACTION_ID,
                        "text": {"type": "plain_text", "text": f"Connect {server}"[:75]},
                        "url": connect_url,
                        "value": server[:2000],
                        "style": "primary",
                    }
                ],
            },
        ],
    )


def auth_provider_block(login_url: str) -> Block:
    """Slack's standard connect block for opsbot's company sign-in (``value`` names it)."""
    return {
        "type": "auth_provider",
        "block_id": "connect",
        "value": AUTH_PROVIDER_VALUE,
        "name": {"type": "plain_text", "text": "Company account"},
        "description": {
            "type": "plain_text",
            "text": "opsbot answers from ticketing, docs and the database as you.",
        },
        "is_connected": False,
        "auth_url": login_url,
    }


def slack_date(moment: datetime) -> str:
    """A date every reader sees in their own time zone (ISO fallback for old clients)."""
    stamp = int(moment.timestamp())
    return f"<!date^{stamp}^{{date_short_pretty}} {{time}}|{moment.isoformat()}>"


def status_text(status: UserStatus) -> str:
    if status.problem:
        return f":warning: {escape(status.problem)}"
    if not status.linked:
        return "Your Slack account is *not connected* to a company account."
    who = escape(status.email or status.subject or "unknown")
    groups = ", ".join(sorted(status.groups)) or "none"
    return f"Connected as *{who}*.\nGroups: {escape(groups)}"


def approval_line(view: ApprovalView) -> str:
    """One Home item: tool, server, the arguments on one line, requester, state, expiry."""
    state = "" if view.status == "pending" else f" — {escape(describe_state(view.status))}"
    return (
        f"`{escape(view.server)}` · `{escape(view.tool)}` ({escape(args_summary(view.args))})"
        f" for {escape(view.requester)}{state} — expires {slack_date(view.expires_at)}"
    )
