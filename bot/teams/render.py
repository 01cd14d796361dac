"""Adaptive Cards (1.5) for replies: answers with their sources (split when long), the
sign-in card, refusals and notes. Every function returns plain dicts (activities as Teams'
wire format expects them, camelCase), ready for ``Activity.model_validate``.

Limits: Teams refuses messages above about 100 KB (413 ``MessageSizeTooBig``); opsbot keeps
each card's text under ``CARD_TEXT_LIMIT`` characters, far below once JSON-encoded.
"""

from __future__ import annotations

import re
from typing import Any

from bot.teams.core import Answer, Source

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
CARD_VERSION = "1.5"
CARD_TEXT_LIMIT = 12_000
SIGN_IN_TITLE = "Connect your account"

_MD_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
# Adaptive Cards' TextBlock Markdown: keep the model's emphasis and lists, but no Markdown
# link it wrote (only sources carry links) and nothing that looks like an HTML tag.
_TAG = re.compile(r"<[^>\n]*>")

Card = dict[str, Any]
ActivityJson = dict[str, Any]


def plain_text(text: str, allowed_links: frozenset[str] = frozenset()) -> str:
    """Model text made safe for a TextBlock: a Markdown link becomes clickable only when its URL
    is one the tool results carried; tags are dropped."""
    text = _TAG.sub("", text)
    return _MD_LINK.sub(lambda m: m.group(0) if m.group(2) in allowed_links else m.group(1), text)


def card(body: list[dict[str, Any]], actions: list[dict[str, Any]] | None = None) -> Card:
    content: Card = {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "body": body,
    }
    if actions:
        content["actions"] = actions
    return content


def card_activity(content: Card, summary: str = "") -> ActivityJson:
    activity: ActivityJson = {
        "type": "message",
        "attachments": [{"contentType": CARD_CONTENT_TYPE, "content": content}],
    }
    if summary:
        activity["summary"] = summary[:200]
    return activity


def text_activity(text: str) -> ActivityJson:
    return {"type": "message", "text": text, "textFormat": "plain"}


def typing_activity() -> ActivityJson:
    return {"type": "typing"}


def text_block(text: str, **style: Any) -> dict[str, Any]:
    return {"type": "TextBlock", "text": text, "wrap": True, **style}


def split_text(text: str, limit: int = CARD_TEXT_LIMIT) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut between paragraphs, then lines,
    then words where possible."""
    pieces: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        window = rest[:limit]
        cut = max(window.rfind("\n\n"), 0) or max(window.rfind("\n"), 0) or window.rfind(" ")
        if cut <= limit // 4:
            cut = limit
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest or not pieces:
        pieces.append(rest)
    return pieces


def _source_line(source: Source) -> str:
    label = f"{source.system} {source.id}".strip()
    label = plain_text(label).replace("[", "(").replace("]", ")")
    return f"- [{label}]({source.link})" if source.link else f"- {label}"


def answer_activities(answer: Answer) -> list[ActivityJson]:
    """The answer as one card, or several when long; the last one lists sources and caveats."""
    pieces = _answer_pieces(answer)
    activities = [card_activity(card([text_block(p)]), p) for p in pieces[:-1]]
    body = [text_block(pieces[-1]), *_closing_body(answer)]
    activities.append(card_activity(card(body), pieces[-1]))
    return activities


def streamed_answer_activities(answer: Answer) -> tuple[ActivityJson, list[ActivityJson]]:
    """A streamed answer's final message (it replaces the streamed text: the answer's text,
    the first piece when long, with a card of its sources, actions and caveats) and the
    cards that follow it when the answer is long (the last one with that card's content)."""
    pieces = _answer_pieces(answer)
    closing = _closing_body(answer)
    final: ActivityJson = {"type": "message", "text": pieces[0], "textFormat": "markdown"}
    rest = [card_activity(card([text_block(p)]), p) for p in pieces[1:]]
    if rest and closing:
        last = rest[-1]["attachments"][0]["content"]
        last["body"] = [*last["body"], *closing]
    elif closing:
        final["attachments"] = [{"contentType": CARD_CONTENT_TYPE, "content": card(closing)}]
    return final, rest


def stream_text(text: str) -> str:
    """Answer text while it streams: no link at all (the sources, which alone may carry
    links, come with the final message, which replaces it)."""
    return plain_text(text)


def _answer_pieces(answer: Answer) -> list[str]:
    allowed = frozenset(s.link for s in answer.sources if s.link)
    return split_text(plain_text(answer.answer, allowed))


def _closing_body(answer: Answer) -> list[dict[str, Any]]:
    """What follows an answer's text: what was done, its sources, its caveats."""
    body: list[dict[str, Any]] = []
    if answer.actions_taken:
        body.append(
            text_block("**Done:** " + "; ".join(plain_text(a) for a in answer.actions_taken))
        )
    if answer.sources:
        body.append(text_block("**Sources**", spacing="Medium"))
        body.append(text_block("\n".join(_source_line(s) for s in answer.sources)))
    for caveat in answer.caveats:
        body.append(text_block(plain_text(caveat), isSubtle=True, size="Small"))
    return body


def sign_in_activity(login_url: str) -> ActivityJson:
    """The sign-in card: a button that opens the company IdP's login (the same one as Slack's
    Connect button). It goes to the person alone (their personal chat): the login it starts is
    theirs, and anyone else completing it would link their own account to this Teams user."""
    content = card(
        [
            text_block(SIGN_IN_TITLE, weight="Bolder", size="Medium"),
            text_block(
                "opsbot acts as you in the company's systems, so it needs to know who you "
                "are. Sign in once with your company account; you can disconnect at any time."
            ),
        ],
        [{"type": "Action.OpenUrl", "title": "Sign in", "url": login_url}],
    )
    return card_activity(content, SIGN_IN_TITLE)


def server_connect_activity(server: str, connect_url: str) -> ActivityJson:
    """*Connect <server>*: the MCP server signs each user in itself (``auth: oauth``). Sent
    to the asker alone, like the sign-in card: the link is bound to them."""
    title = f"Connect {server}"
    content = card(
        [
            text_block(title, weight="Bolder", size="Medium"),
            text_block(
                f"{server} signs each person in itself. Connect it once with your own account "
                "and ask again; opsbot then uses it as you."
            ),
        ],
        [{"type": "Action.OpenUrl", "title": title, "url": connect_url}],
    )
    return card_activity(content, title)


def refusal_activity(reason: str) -> ActivityJson:
    return card_activity(card([text_block(f"⛔ {plain_text(reason)}")]), reason)


def note_activity(text: str) -> ActivityJson:
    return card_activity(card([text_block(text)]), text)
